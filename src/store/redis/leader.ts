import type { Redis } from 'ioredis'
import type { Logger } from 'pino'
import type { AlertMeasures, Leadership } from '../../ports/leader.js'
import type { Outage } from './connection.js'

/** Extends the lease when it is still this replica's. KEYS: the lease. ARGV: holder, ttl (ms). */
const RENEW = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`

type Scripted = Redis & { meterdRenew(key: string, holder: string, ttlMs: number): Promise<number> }

/**
 * The cluster's leader: `SET <prefix>leader <holder> NX PX <ttl>`, renewed every third of the
 * ttl by its holder. A replica that cannot renew (Redis unreachable, the lease lost) stops being
 * the leader at once, and at the latest two thirds of the ttl after its last renewal, before the
 * lease can pass to another. When the holder dies, the lease expires after at most the ttl and
 * another replica takes it at its next attempt: within 4/3 of the ttl.
 */
export class RedisLeadership implements Leadership {
  private held = false
  private renewedAt = 0
  private timer?: NodeJS.Timeout
  private readonly redis: Scripted

  constructor(redis: Redis, private readonly key: string, private readonly holder: string, private readonly ttlMs: number, private readonly outage: Outage, private readonly logger: Logger) {
    this.redis = redis as Scripted
    if (!('meterdRenew' in redis)) redis.defineCommand('meterdRenew', { numberOfKeys: 1, lua: RENEW })
  }

  get leader(): boolean {
    return this.held && performance.now() - this.renewedAt < (this.ttlMs * 2) / 3
  }

  /** Starts competing for the lease (idempotent). */
  start(): void {
    if (this.timer) return
    void this.tick()
    this.timer = setInterval(() => void this.tick(), this.ttlMs / 3)
    this.timer.unref()
  }

  /** Stops, and hands the lease over at once when this replica holds it. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer)
    this.timer = undefined
    if (!this.held) return
    this.held = false
    await this.redis.eval(`if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end return 0`, 1, this.key, this.holder).catch(() => undefined)
  }

  private async tick(): Promise<void> {
    const started = performance.now()
    let held: boolean
    try {
      held = this.held
        ? (await this.redis.meterdRenew(this.key, this.holder, this.ttlMs)) === 1
        : (await this.redis.set(this.key, this.holder, 'PX', this.ttlMs, 'NX')) === 'OK'
      this.outage.recovered()
    } catch (err) {
      this.outage.failed(err)
      held = false
    }
    if (!this.timer) return // stopped meanwhile
    if (held) this.renewedAt = started
    if (held !== this.held) this.logger.info({ holder: this.holder }, held ? 'this replica leads the cluster (alert evaluation)' : 'this replica no longer leads the cluster')
    this.held = held
  }
}

/** Per-replica alert measurements: a hash per rule (`<prefix>am:<ruleId>`: replica → JSON). */
export class RedisAlertMeasures implements AlertMeasures {
  constructor(private readonly redis: Redis, private readonly prefix: string, private readonly outage: Outage) {}

  async publish(ruleId: string, replica: string, value: string, ttlMs: number): Promise<void> {
    const key = `${this.prefix}am:${ruleId}`
    await this.outage.guard(() => this.redis.multi().hset(key, replica, value).pexpire(key, ttlMs).exec())
  }

  async gather(ruleId: string): Promise<string[]> {
    return Object.values(await this.outage.guard(() => this.redis.hgetall(`${this.prefix}am:${ruleId}`)))
  }
}
