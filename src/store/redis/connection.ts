import { Redis, type Command, type RedisOptions } from 'ioredis'
import type { Logger } from 'pino'
import type { SharedStateConfig } from '../../core/config/schema.js'
import { ApiError } from '../../core/errors.js'

export type RedisSettings = SharedStateConfig['redis']

/** The message of a command Redis did not answer in time (as ioredis words its own). */
export const COMMAND_TIMED_OUT = 'Command timed out'

/**
 * Whether a command failed without being sent (ioredis refuses it while disconnected, as there
 * is no offline queue). Any other failure may come from a command Redis received, and may still
 * run: a late answer is not a refusal.
 */
export const neverSent = (err: unknown): boolean => err instanceof Error && err.message.startsWith("Stream isn't writeable")

/**
 * A Redis client whose commands are late only when Redis is: `replyTimeoutMs` after a command
 * was sent, and after this process has read what arrived meanwhile.
 *
 * ioredis's own `commandTimeout` decides in the timers phase of the event loop, which comes
 * before the poll phase that reads replies: when the loop had stalled past the bound (a busy
 * machine, a long collection), commands Redis had answered, and executed, failed as timed out,
 * and the request was told 503 "nothing was stored" while its row, claim or tier move was in
 * Redis. Here the verdict waits for the check phase, after the poll phase has read the socket.
 *
 * Auto-pipelining stays off: with it, ioredis 6 threw from its own callback when commands of a
 * pipeline timed out ("results[i] is not iterable"), an uncaught exception that ended the
 * process; every replica of a cluster whose Redis stalled for a second exited. Commands are
 * still pipelined on the connection (sent without waiting for the replies before them); only
 * their batching into one write per turn is lost.
 */
export class RedisClient extends Redis {
  private readonly armed = new WeakSet<Command>()

  constructor(url: string, options: Pick<RedisOptions, 'lazyConnect' | 'enableOfflineQueue' | 'maxRetriesPerRequest' | 'connectTimeout' | 'connectionName' | 'retryStrategy'>, private readonly replyTimeoutMs: number) {
    super(url, { ...options, enableAutoPipelining: false })
  }

  override sendCommand(command: Command, stream?: Parameters<Redis['sendCommand']>[1]): unknown {
    // Once per command (ioredis sends a command again after a reconnect); none during the constructor.
    if (this.replyTimeoutMs && !this.armed.has(command)) {
      this.armed.add(command)
      let settled = false
      const late = setTimeout(() => setImmediate(() => settled || command.reject(new Error(COMMAND_TIMED_OUT))), this.replyTimeoutMs)
      late.unref()
      const done = (): void => {
        settled = true
        clearTimeout(late)
      }
      command.promise.then(done, done)
    }
    return super.sendCommand(command, stream)
  }
}

/**
 * A Redis connection as the shared state uses it (the ratelimit extension's settings): no
 * offline queue and no retry of a command, so an unreachable Redis fails a request at once
 * (503 + Retry-After) instead of holding it; reconnects in the background.
 */
export function connect(settings: RedisSettings, logger: Logger, name: string): Redis {
  const redis = new RedisClient(
    settings.url,
    {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      connectTimeout: settings.connect_timeout_ms,
      connectionName: name,
      retryStrategy: (times) => Math.min(100 * times, 2000),
    },
    settings.command_timeout_ms,
  )
  redis.on('error', (err) => logger.debug({ err }, 'redis connection error'))
  return redis
}

/** The answer when correctness needs the shared state and it cannot be reached: nothing was stored. */
function sharedStateUnavailable(): ApiError {
  return new ApiError(503, 'api_error', 'shared_state_unavailable', 'the shared state of the gateway cluster (Redis) is unreachable or did not answer in time; the request was not stored; retry later', {
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

/** Waits for `p` (its outcome ignored), `ms` at most; the timer does not outlive it. */
export async function waitAtMost(p: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  await Promise.race([p.then(noop, noop), new Promise<void>((r) => (timer = setTimeout(r, Math.max(0, ms))))])
  clearTimeout(timer)
}

const noop = (): void => undefined
