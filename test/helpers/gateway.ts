/** Shared set-up of the gateway tests (not a test itself). */
import { join } from 'node:path'
import { DEFAULT_CONFIG_PATH } from '../../src/core/config/load.js'
import type { SharedStateConfig } from '../../src/core/config/schema.js'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { createTelemetry } from '../../src/core/telemetry.js'
import { openRedisSharedState } from '../../src/store/redis/index.js'
import { Store } from '../../src/store/store.js'
import { removeDir, spawnMeterd, tempDir, writeConfig, type ChildMeterd } from './meterd.js'
import { startRedis } from './redis-server.js'

/**
 * A replica's store and Redis shared state in this process (as `meterd keys` opens them), closed
 * when `t` ends. resync_seconds is far apart: a test that wants resyncs runs them itself. `redis`
 * goes over the settings.
 */
export async function openReplica(t: { teardown(fn: () => Promise<void>): void }, path: string, redisUrl: string, redis: Partial<SharedStateConfig['redis']> = {}) {
  const store = new Store({ path })
  const { logger, registry } = createTelemetry({ level: 'silent' })
  const shared = await openRedisSharedState(
    { url: redisUrl, key_prefix: 'meterd:', command_timeout_ms: 1000, connect_timeout_ms: 2000, claim_ttl_seconds: 30, resync_seconds: 60, leader_lease_seconds: 5, ...redis },
    store,
    logger,
    registry,
  )
  t.teardown(async () => {
    await shared.close()
    await store.close()
  })
  return { store, shared }
}

/** Polls `ok` every 5 ms; resolves with the time it took to hold, or throws after `timeoutMs`. */
export async function within(timeoutMs: number, ok: () => Promise<boolean>): Promise<number> {
  const t0 = performance.now()
  for (;;) {
    if (await ok()) return performance.now() - t0
    if (performance.now() - t0 > timeoutMs) throw new Error(`not within ${timeoutMs} ms`)
    await new Promise((r) => setTimeout(r, 5))
  }
}

/**
 * How long after now a change holds for every request: a request is sent every 5 ms, without
 * waiting for the answers before it (a replica under load answers each one late, and that
 * lateness is not the change's), until the first that holds is 100 ms old; resolves with when
 * the first request was sent from which on every answer held. Throws after `timeoutMs`.
 */
export async function heldFrom(timeoutMs: number, ok: () => Promise<boolean>): Promise<number> {
  const t0 = performance.now()
  const sent: { at: number; held?: boolean; answered: Promise<void> }[] = []
  let firstHeld = Infinity
  for (;;) {
    const at = performance.now() - t0
    if (at > firstHeld + 100) break
    if (at > timeoutMs) throw new Error(`not within ${timeoutMs} ms`)
    const s: (typeof sent)[number] = { at, answered: Promise.resolve() }
    s.answered = ok().then(
      (held) => {
        s.held = held
        if (held) firstHeld = Math.min(firstHeld, s.at)
      },
      () => void (s.held = false),
    )
    sent.push(s)
    await new Promise((r) => setTimeout(r, 5))
  }
  await Promise.all(sent.map((s) => s.answered))
  let from = sent.length
  while (from > 0 && sent[from - 1].held) from--
  if (from === sent.length) throw new Error('the last request did not hold')
  return sent[from].at
}

/** A gateway cluster of `meterd run` replicas (one worker each) on one real redis-server. */
export interface GatewayCluster {
  dir: string
  redis: { url: string; port: number; stop(): Promise<void> }
  configFiles: string[]
  env: Record<string, string>
  replicas: ChildMeterd[]
  /** Starts replica `i` (again) on its own data directory. */
  start(i: number): Promise<ChildMeterd>
}

/**
 * Starts a redis-server and `count` replicas on config/gateway.yaml, stopped when `t` ends.
 * Periodic resyncs far apart (what reaches the others in time does so by pub/sub); claims of a
 * replica that dies expire after 2 s, so a client's retries do not wait 30 s; no error-pattern
 * blocks (tests poll through 401s and 404s; test/ratelimit covers them); webhook destinations on
 * 127.0.0.1 allowed. `redis` and `extensions` go over these, one extension at a time.
 */
export async function startGatewayCluster(
  t: { teardown(fn: () => unknown): void },
  opts: { redis?: Record<string, unknown>; extensions?: Record<string, unknown>; count?: number } = {},
): Promise<GatewayCluster> {
  const redis = await startRedis()
  t.teardown(() => redis.stop())
  const dir = tempDir('meterd-gateway-')
  t.teardown(() => removeDir(dir))
  const override = writeConfig(dir, {
    server: { shared_state: { redis: { resync_seconds: 60, claim_ttl_seconds: 2, ...opts.redis } } },
    extensions: {
      ratelimit: { limits: { metering: 100000, analytics: 100000, platform: 100000 }, error_pattern: { enabled: false } },
      exportconfigs: { allow_private_destinations: ['127.0.0.1'], poll_interval_ms: 50 },
      ...opts.extensions,
    },
  })
  const configFiles = [DEFAULT_CONFIG_PATH, join(PACKAGE_ROOT, 'config', 'gateway.yaml'), override]
  // One master key for the cluster: each replica opens the signing secrets another sealed.
  const env = { METERD_REDIS_URL: redis.url, METERD_WORKERS: '1', METERD_MASTER_KEY: 'cluster-test-master-key-0123456789abcdef' }
  const c: GatewayCluster = {
    dir,
    redis,
    configFiles,
    env,
    replicas: [],
    async start(i) {
      const m = await spawnMeterd(t, { dataDir: join(dir, `data-${i}`), configFiles, env })
      c.replicas[i] = m
      return m
    },
  }
  for (let i = 0; i < (opts.count ?? 3); i++) await c.start(i)
  return c
}
