import type { Component, CreateSettings, ExtensionFactory, Host } from '../../host/component.js'
import { ApiError } from '../../core/errors.js'
import { sharedCounter, tally } from '../../core/telemetry.js'
import type { AdmissionHook, AdmissionRequest, RateLimitBucket } from '../../transport/admission/index.js'
import type { CallerKey, ErrorPatternRules, Hit, RateLimitBackend } from './backend.js'
import { type BucketLimits, type RateLimitConfig } from './config.js'
import { MemoryBackend } from './memory.js'
import { ClusterBackend } from './cluster.js'
import { ratelimitDescriptor } from './descriptor.js'

const BUCKETS: readonly RateLimitBucket[] = ['metering', 'analytics', 'platform']

type Outcome = 'allowed' | 'bucket-rate' | 'error-pattern'

/**
 * SPEC's Limits as an admission stage (DESIGN §3, §5): for every authenticated request of a
 * bucket, error-pattern block? → count against the account's bucket → headers on whatever
 * the answer is; every 4xx answer (429 excluded) is counted to its caller.
 */
export class RateLimiter implements Component, AdmissionHook {
  private host?: Host
  private backend?: RateLimitBackend
  private readonly accounts: Map<string, BucketLimits>
  private readonly rules: ErrorPatternRules
  private readonly outcomes: Record<RateLimitBucket, Record<Outcome, () => void>>

  constructor(private readonly settings: CreateSettings, private readonly config: RateLimitConfig) {
    this.accounts = new Map(Object.entries(config.accounts).map(([account, limits]) => [account, { ...config.limits, ...limits }]))
    const ep = config.error_pattern
    this.rules = {
      threshold: ep.threshold,
      windowMs: ep.window_seconds * 1000,
      initialCooldownMs: ep.initial_cooldown_seconds * 1000,
      maxCooldownMs: ep.max_cooldown_seconds * 1000,
    }
    // Counted on every request: a tally's bound series is a plain addition (prom-client's labelled
    // child hashed and validated its labels on each increment, ~3,500 instructions per request).
    const requests = tally(settings.registry, 'meterd_ratelimit_requests_total', 'Requests seen by rate limiting, by bucket, decision and reason', ['bucket', 'decision', 'reason'])
    const child = (bucket: string, decision: string, reason: string) => {
      const add = requests.bind({ bucket, decision, reason })
      return () => add(1)
    }
    this.outcomes = Object.fromEntries(
      BUCKETS.map((b) => [
        b,
        { allowed: child(b, 'allowed', 'none'), 'bucket-rate': child(b, 'limited', 'bucket-rate'), 'error-pattern': child(b, 'limited', 'error-pattern') },
      ]),
    ) as RateLimiter['outcomes']
  }

  async start(host: Host): Promise<void> {
    this.host = host
    if (this.config.backend === 'redis') {
      const failures = sharedCounter(this.settings.registry, 'meterd_ratelimit_backend_failures_total', 'Rate-limit decisions that could not reach the backend', ['backend'])
      // ioredis loads only in gateway mode: standalone daemons keep their idle memory.
      const { RedisBackend } = await import('./redis.js')
      const redis = new RedisBackend({
        config: this.config.redis,
        rules: this.rules,
        logger: this.settings.logger,
        failures: failures.labels({ backend: 'redis' }),
      })
      await redis.connect()
      this.backend = redis
    } else if (host.cluster.workers > 1) {
      this.backend = new ClusterBackend(host.cluster, this.rules)
    } else {
      this.backend = new MemoryBackend(this.rules)
    }
    host.admission.addHook(this)
  }

  async shutdown(): Promise<void> {
    const b = this.backend
    this.backend = undefined
    await b?.close()
  }

  /** The limit of an account's bucket: its own override, else the global one. */
  limitOf(account: string, bucket: RateLimitBucket): number {
    return (this.accounts.get(account) ?? this.config.limits)[bucket]
  }

  admit(req: AdmissionRequest): ApiError | undefined | Promise<ApiError | undefined> {
    const backend = this.backend
    const bucket = req.bucket
    const principal = req.principal
    if (!backend || bucket === null || !principal) return undefined
    const limit = this.limitOf(principal.account, bucket)
    const now = this.host!.now()
    const window = Math.floor(now / 1000)
    // When the backend cannot decide (redis down with fail_open false; a worker that lost its
    // supervisor) the answer says so, and which bucket and window it is about, with nothing left
    // to spend. Not the catch-all 503: that one says the record could not be stored.
    const unavailable = (err: unknown): ApiError => {
      this.setHeaders(req, bucket, limit, window, 0)
      if (err instanceof ApiError) return err
      this.settings.logger.warn({ err, bucket }, 'the rate limit could not be decided; the request was refused (503)')
      return rateLimiterUnavailable(bucket)
    }
    let hit: Hit | Promise<Hit>
    try {
      hit = backend.hit(`a:${principal.account}`, bucket, window, limit, now)
    } catch (err) {
      return unavailable(err)
    }
    if (hit instanceof Promise) return hit.then((h) => this.decide(req, bucket, limit, window, now, h), unavailable)
    return this.decide(req, bucket, limit, window, now, hit)
  }

  /** An unauthenticated caller whose IP is blocked gets the 429 instead of its 401. */
  admitUnauthenticated(req: AdmissionRequest): ApiError | undefined | Promise<ApiError | undefined> {
    const backend = this.backend
    if (!backend || !this.config.error_pattern.enabled || req.bucket === null) return undefined
    const now = this.host!.now()
    const bucket = req.bucket
    const refuse = (until: number): ApiError | undefined => {
      if (until <= now) return undefined
      this.outcomes[bucket]['error-pattern']()
      return errorPattern(until - now)
    }
    let until: number | Promise<number>
    try {
      until = backend.blockedUntil(this.ipCaller(req), now)
    } catch (err) {
      return err instanceof ApiError ? err : rateLimiterUnavailable(bucket)
    }
    return until instanceof Promise ? until.then(refuse, () => undefined) : refuse(until)
  }

  observe(req: AdmissionRequest, status: number): void {
    if (status < 400 || status >= 500 || status === 429) return
    if (!this.backend || !this.config.error_pattern.enabled) return
    const caller = req.principal ? `a:${req.principal.account}` : this.ipCaller(req)
    this.backend.recordError(caller, this.host!.now())
  }

  private decide(req: AdmissionRequest, bucket: RateLimitBucket, limit: number, window: number, now: number, hit: Hit): ApiError | undefined {
    this.setHeaders(req, bucket, limit, window, hit.count >= limit ? 0 : limit - hit.count)
    if (hit.blockedUntil > now) {
      this.outcomes[bucket]['error-pattern']()
      return errorPattern(hit.blockedUntil - now)
    }
    if (hit.count > limit) {
      this.outcomes[bucket]['bucket-rate']()
      return bucketRate(bucket, limit, (window + 1) * 1000 - now)
    }
    this.outcomes[bucket].allowed()
    return undefined
  }

  private setHeaders(req: AdmissionRequest, bucket: RateLimitBucket, limit: number, window: number, remaining: number): void {
    const headers = req.responseHeaders
    headers['x-ratelimit-limit'] = String(limit)
    headers['x-ratelimit-remaining'] = String(remaining)
    headers['x-ratelimit-reset'] = String(window + 1)
    headers['x-ratelimit-bucket'] = bucket
  }

  private ipCaller(req: AdmissionRequest): CallerKey {
    const header = this.config.client_ip_header
    if (header !== undefined) {
      const first = req.header(header.toLowerCase())?.split(',')[0]?.trim()
      if (first) return `ip:${first}`
    }
    return `ip:${req.ip}`
  }
}

const retryAfter = (ms: number): string => String(Math.max(1, Math.ceil(ms / 1000)))

/** SPEC Errors, 429 with `bucket-rate`: the body names the bucket. */
export function bucketRate(bucket: RateLimitBucket, limit: number, msLeft: number): ApiError {
  const seconds = retryAfter(msLeft)
  return new ApiError(429, 'rate_limit_error', 'rate_limit_exceeded', `the ${bucket} bucket allows ${limit} requests per second for this account; retry after ${seconds} s`, {
    headers: { 'retry-after': seconds, 'x-ratelimit-limited-reason': 'bucket-rate' },
    extra: { bucket },
  })
}

/** 503 `rate_limiter_unavailable`: the limit could not be decided, so the request was not processed. */
export function rateLimiterUnavailable(bucket: RateLimitBucket): ApiError {
  return new ApiError(
    503,
    'api_error',
    'rate_limiter_unavailable',
    `the rate limit of the ${bucket} bucket could not be decided, so the request was not processed (nothing was stored); retry after 1 s`,
    { headers: { 'retry-after': '1' } },
  )
}

/** SPEC Errors, 429 with `error-pattern`: no `bucket`; Retry-After is the remaining cooldown. */
export function errorPattern(msLeft: number): ApiError {
  const seconds = retryAfter(msLeft)
  return new ApiError(
    429,
    'rate_limit_error',
    'rate_limit_exceeded',
    `too many failing requests (4xx) from this caller; fix the requests (authentication, missing fields, invalid identifiers) and retry after ${seconds} s`,
    { headers: { 'retry-after': seconds, 'x-ratelimit-limited-reason': 'error-pattern' } },
  )
}

export const ratelimitFactory: ExtensionFactory<typeof ratelimitDescriptor.schema> = {
  ...ratelimitDescriptor,
  create: (settings, config) => new RateLimiter(settings, config),
}
