import type { Redis } from 'ioredis'
import type { Logger } from 'pino'
import { ApiError } from '../../core/errors.js'
import { RedisClient } from '../../store/redis/connection.js'
import type { RateLimitBucket } from '../../transport/admission/index.js'
import type { CallerKey, ErrorPatternRules, Hit, RateLimitBackend } from './backend.js'
import type { RedisConfig } from './config.js'
import { MemoryBackend } from './memory.js'

/**
 * One request, atomically: a blocked caller is not counted; otherwise INCR the window's
 * counter and give it a TTL when it is new. KEYS: counter (window number in the name), block.
 * ARGV: now (ms), counter TTL (ms). Returns {count, blockedUntil}.
 */
const HIT_SCRIPT = `
local untilT = tonumber(redis.call('HGET', KEYS[2], 'until') or '0')
if untilT > tonumber(ARGV[1]) then
  return {tonumber(redis.call('GET', KEYS[1]) or '0'), untilT}
end
local c = redis.call('INCR', KEYS[1])
if c == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return {c, 0}
`

/**
 * One 4xx answer. KEYS: the caller's last error times (a list), block. ARGV: now, threshold,
 * window, initial cooldown, max cooldown (ms). The same rules as MemoryBackend.recordError.
 * Returns the end of the block this error started, or 0.
 */
const ERROR_SCRIPT = `
local now = tonumber(ARGV[1])
local threshold = tonumber(ARGV[2])
local windowMs = tonumber(ARGV[3])
local b = redis.call('HMGET', KEYS[2], 'until', 'cooldown')
local untilT = tonumber(b[1] or '0')
local cooldown = tonumber(b[2] or '0')
if untilT > now then return 0 end
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], 0, threshold - 1)
redis.call('PEXPIRE', KEYS[1], math.ceil(windowMs))
local oldest = redis.call('LINDEX', KEYS[1], threshold - 1)
if (not oldest) or tonumber(oldest) <= now - windowMs then return 0 end
if cooldown > 0 and now - untilT <= cooldown then
  cooldown = math.min(cooldown * 2, tonumber(ARGV[5]))
else
  cooldown = tonumber(ARGV[4])
end
untilT = now + cooldown
redis.call('HSET', KEYS[2], 'until', string.format('%.0f', untilT), 'cooldown', string.format('%.0f', cooldown))
redis.call('PEXPIRE', KEYS[2], string.format('%.0f', 2 * cooldown))
redis.call('DEL', KEYS[1])
return untilT
`

/** Counters outlive their window a little, so a replica whose clock lags still finds them. */
const COUNTER_TTL_MS = 10_000

type ScriptedRedis = Redis & {
  meterdRateHit(counter: string, block: string, now: number, ttlMs: number): Promise<[number, number]>
  meterdRateError(errors: string, block: string, now: number, threshold: number, windowMs: number, initial: number, max: number): Promise<number>
}

export interface RedisBackendOptions {
  config: RedisConfig
  rules: ErrorPatternRules
  logger: Logger
  /** Counts each request that could not reach Redis. */
  failures: { inc(): void }
}

/**
 * Gateway mode: windows and blocks shared by every replica through Redis, one script call
 * per request. Keys already over their limit in the current window, and blocks, are cached
 * here so a flood costs no Redis round trips. When Redis cannot be reached, `fail_open`
 * admits requests through a local MemoryBackend (each replica enforcing the limit alone);
 * otherwise requests get a 503.
 */
export class RedisBackend implements RateLimitBackend {
  private readonly redis: ScriptedRedis
  private readonly local: MemoryBackend
  /** caller|bucket → the window in which it is already over its limit. */
  private readonly exhausted = new Map<string, number>()
  /** caller → end of its block. */
  private readonly blocks = new Map<CallerKey, number>()
  /** caller|bucket → the count Redis last answered, and its window: what a cached block reports, since blocked requests count nowhere. */
  private readonly counts = new Map<string, { window: number; count: number }>()
  private sweptWindow = 0
  private failing = false
  private readonly prefix: string

  constructor(private readonly opts: RedisBackendOptions) {
    const { config } = opts
    this.prefix = config.key_prefix
    this.local = new MemoryBackend(opts.rules)
    this.redis = new RedisClient(
      config.url,
      {
        lazyConnect: true,
        // Fail fast instead of queueing requests behind a reconnect.
        enableOfflineQueue: false,
        maxRetriesPerRequest: 0,
        connectTimeout: config.connect_timeout_ms,
        retryStrategy: (times) => Math.min(100 * times, 2000),
      },
      config.command_timeout_ms,
    ) as unknown as ScriptedRedis
    this.redis.defineCommand('meterdRateHit', { numberOfKeys: 2, lua: HIT_SCRIPT })
    this.redis.defineCommand('meterdRateError', { numberOfKeys: 2, lua: ERROR_SCRIPT })
    this.redis.on('error', (err) => opts.logger.debug({ err }, 'redis connection error'))
  }

  /** Connects; when Redis is not there yet, start-up goes on and the failure policy applies until it is. */
  async connect(): Promise<void> {
    try {
      await this.redis.connect()
    } catch (err) {
      this.noteFailure(err)
    }
  }

  async hit(caller: CallerKey, bucket: RateLimitBucket, window: number, limit: number, now: number): Promise<Hit> {
    if (window !== this.sweptWindow) this.sweep(window, now)
    const blocked = this.blocks.get(caller)
    const k = `${caller}|${bucket}`
    if (blocked !== undefined && blocked > now) {
      // X-RateLimit-Remaining stays what is left of the window, as an uncached answer says.
      const seen = this.counts.get(k)
      return { count: seen?.window === window ? seen.count : 0, blockedUntil: blocked }
    }
    if (this.exhausted.get(k) === window) return { count: limit + 1, blockedUntil: 0 }
    let res: [number, number]
    try {
      res = await this.redis.meterdRateHit(`${this.prefix}{${caller}}:${bucket}:${window}`, `${this.prefix}{${caller}}:block`, now, COUNTER_TTL_MS)
    } catch (err) {
      this.failed(err)
      return this.local.hit(caller, bucket, window, limit, now)
    }
    this.recovered()
    const [count, blockedUntil] = res
    this.counts.set(k, { window, count })
    if (blockedUntil > 0) this.blocks.set(caller, blockedUntil)
    else if (count >= limit) this.exhausted.set(k, window)
    return { count, blockedUntil }
  }

  async blockedUntil(caller: CallerKey, now: number): Promise<number> {
    const cached = this.blocks.get(caller)
    if (cached !== undefined && cached > now) return cached
    let until: number
    try {
      until = Number((await this.redis.hget(`${this.prefix}{${caller}}:block`, 'until')) ?? 0)
    } catch (err) {
      this.failed(err)
      return this.local.blockedUntil(caller, now)
    }
    this.recovered()
    if (until > now) this.blocks.set(caller, until)
    return until > now ? until : 0
  }

  recordError(caller: CallerKey, now: number): void {
    const { threshold, windowMs, initialCooldownMs, maxCooldownMs } = this.opts.rules
    this.redis
      .meterdRateError(`${this.prefix}{${caller}}:errors`, `${this.prefix}{${caller}}:block`, now, threshold, windowMs, initialCooldownMs, maxCooldownMs)
      .then(
        (until) => {
          this.recovered()
          if (until > 0) this.blocks.set(caller, until)
        },
        (err) => {
          this.noteFailure(err)
          if (this.opts.config.fail_open) this.local.recordError(caller, now)
        },
      )
  }

  async close(): Promise<void> {
    await this.local.close()
    try {
      await this.redis.quit()
    } catch {
      this.redis.disconnect()
    }
  }

  /** A failure on a request path: counted and logged; throws the 503 when the policy is to fail closed. */
  private failed(err: unknown): void {
    this.noteFailure(err)
    if (!this.opts.config.fail_open) {
      throw new ApiError(503, 'api_error', 'rate_limiter_unavailable', 'the rate limiter is unavailable; retry later', { headers: { 'retry-after': '1' } })
    }
  }

  /** Counts a Redis failure and logs it once per outage. */
  private noteFailure(err: unknown): void {
    this.opts.failures.inc()
    const open = this.opts.config.fail_open
    if (!this.failing) {
      this.failing = true
      this.opts.logger.warn(
        { err, url: redactUrl(this.opts.config.url), fail_open: open },
        open ? 'redis is unreachable: admitting requests, each replica limiting on its own' : 'redis is unreachable: refusing requests (fail_open is false)',
      )
    }
  }

  private recovered(): void {
    if (!this.failing) return
    this.failing = false
    this.opts.logger.info({ url: redactUrl(this.opts.config.url) }, 'redis is reachable again')
  }

  private sweep(window: number, now: number): void {
    this.sweptWindow = window
    for (const [k, w] of this.exhausted) if (w < window) this.exhausted.delete(k)
    for (const [k, c] of this.counts) if (c.window < window) this.counts.delete(k)
    for (const [k, until] of this.blocks) if (until <= now) this.blocks.delete(k)
  }
}

function redactUrl(url: string): string {
  return url.replace(/\/\/[^@/]*@/, '//***@')
}
