import { Redis } from 'ioredis'
import type { Logger } from 'pino'
import type { SharedStateConfig } from '../../core/config/schema.js'
import { ApiError } from '../../core/errors.js'

export type RedisSettings = SharedStateConfig['redis']

/**
 * A Redis connection as the shared state uses it (the ratelimit extension's settings): no
 * offline queue and no retry of a command, so an unreachable Redis fails a request at once
 * (503 + Retry-After) instead of holding it; reconnects in the background.
 */
export function connect(settings: RedisSettings, logger: Logger, name: string): Redis {
  const redis = new Redis(settings.url, {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: settings.command_timeout_ms,
    connectTimeout: settings.connect_timeout_ms,
    enableAutoPipelining: true,
    connectionName: name,
    retryStrategy: (times) => Math.min(100 * times, 2000),
  })
  redis.on('error', (err) => logger.debug({ err }, 'redis connection error'))
  return redis
}

/** The answer when correctness needs the shared state and it cannot be reached: nothing was stored. */
function sharedStateUnavailable(): ApiError {
  return new ApiError(503, 'api_error', 'shared_state_unavailable', 'the shared state of the gateway cluster (Redis) is unreachable; nothing was stored; retry later', {
    headers: { 'retry-after': '1' },
  })
}

/** Counts Redis failures and logs once per outage; `guard` maps a failure to the 503. */
export class Outage {
  private failing = false

  constructor(private readonly logger: Logger, private readonly url: string, private readonly failures: { inc(): void }) {}

  /** Runs a Redis call; on failure counts it and rejects with the 503 `shared_state_unavailable`. */
  async guard<T>(call: () => Promise<T>): Promise<T> {
    let out: T
    try {
      out = await call()
    } catch (err) {
      this.failed(err)
      throw sharedStateUnavailable()
    }
    this.recovered()
    return out
  }

  failed(err: unknown): void {
    this.failures.inc()
    if (this.failing) return
    this.failing = true
    this.logger.warn({ err, url: redactUrl(this.url) }, 'redis (shared state) is unreachable: requests that need it get 503 with Retry-After')
  }

  recovered(): void {
    if (!this.failing) return
    this.failing = false
    this.logger.info({ url: redactUrl(this.url) }, 'redis (shared state) is reachable again')
  }
}

export function redactUrl(url: string): string {
  return url.replace(/\/\/[^@/]*@/, '//***@')
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))
