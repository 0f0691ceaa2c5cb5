import { randomUUID } from 'node:crypto'
import type { Logger } from 'pino'
import { Gauge, type Registry } from 'prom-client'
import type { SharedStateConfig } from '../../core/config/schema.js'
import { sharedCounter } from '../../core/telemetry.js'
import type { SharedState } from '../../ports/shared.js'
import type { Store } from '../store.js'
import { connect, Outage } from './connection.js'
import { RedisDedup } from './dedup.js'
import { RedisDeliveryClaims } from './deliveries.js'
import { RedisAlertMeasures, RedisLeadership } from './leader.js'
import { RedisTables } from './tables.js'
import { RedisTierQuantities } from './tiers.js'

/**
 * The gateway's shared state in Redis: one connection for commands (pipelined, not auto-pipelined: connection.ts) and one
 * subscribed to table changes. Start-up goes on when Redis is not there yet: requests that need
 * it get 503 + Retry-After until it is.
 */
export async function openRedisSharedState(config: SharedStateConfig['redis'], store: Store, logger: Logger, registry: Registry): Promise<SharedState> {
  const failures = sharedCounter(registry, 'meterd_shared_state_failures_total', 'Calls to the shared state (Redis) that failed', ['backend']).labels({ backend: 'redis' })
  failures.inc(0)
  const outage = new Outage(logger, config.url, failures)
  const redis = connect(config, logger, 'meterd')
  const sub = connect(config, logger, 'meterd-sub')
  try {
    await redis.connect()
  } catch (err) {
    outage.failed(err)
  }
  const prefix = config.key_prefix
  const tables = new RedisTables(redis, sub, store, prefix, config.resync_seconds * 1000, outage, logger)
  const replica = randomUUID()
  const leadership = new RedisLeadership(redis, `${prefix}leader`, replica, config.leader_lease_seconds * 1000, outage, logger)
  const gauge = (registry.getSingleMetric('meterd_cluster_leader') as Gauge | undefined) ??
    new Gauge({ name: 'meterd_cluster_leader', help: '1 on the replica that holds the cluster lease (evaluates the alert rules), else 0', registers: [registry], aggregator: 'max' })
  gauge.set(0)
  let leading: NodeJS.Timeout | undefined
  const twins = sharedCounter(registry, 'meterd_shared_dedup_twins_total', 'Records committed on this replica, unanswered, that a retry stored again on another after their claim expired', [])
  twins.inc(0)
  const dedup = new RedisDedup(redis, prefix, config.claim_ttl_seconds * 1000, outage, store, logger, twins)
  const tiers = new RedisTierQuantities(redis, prefix, outage)
  return {
    replica,
    alertMeasures: new RedisAlertMeasures(redis, prefix, outage),
    lead() {
      if (!leading) {
        leadership.start()
        // A gauge's collect() would be this one object's: set it as the lease moves instead.
        leading = setInterval(() => gauge.set(leadership.leader ? 1 : 0), 100)
        leading.unref()
      }
      return leadership
    },
    dedup,
    tiers,
    tables,
    deliveries: new RedisDeliveryClaims(redis, prefix, outage),
    async close(settleMs = 0) {
      if (leading) clearInterval(leading)
      // What this replica owes Redis (the tier moves of refused requests to give back, the claims
      // whose answer was lost to release) is settled now or never: nobody else knows of it.
      const until = Date.now() + settleMs
      const [moves, claims] = await Promise.all([tiers.giveBackOwed(until), dedup.releasePending(until), leadership.stop()])
      if (moves || claims) {
        logger.warn(
          { tierMoves: moves, claims, waitedMs: Math.max(0, settleMs) },
          'stopping with what Redis did not answer in time: these tier moves may stay counted in their period (its later events priced from a quantity that includes them), these claims may block their retries until claim_ttl_seconds',
        )
      }
      dedup.close()
      await tables.close()
      await Promise.all(
        [sub, redis].map(async (c) => {
          // Redis did not answer within the bound: waiting for its answer to QUIT would only add command_timeout_ms.
          if (moves || claims) return c.disconnect()
          try {
            await c.quit()
          } catch {
            c.disconnect()
          }
        }),
      )
    },
  }
}
