import type { RateLimitBucket } from '../../transport/admission/index.js'
import { nextCooldown, type CallerKey, type ErrorPatternRules, type Hit, type RateLimitBackend } from './backend.js'

interface Counter {
  window: number
  count: number
}

/** The last `threshold` 4xx times of a caller, oldest at `next` once full. */
interface Errors {
  times: Float64Array
  next: number
  filled: number
}

class CallerState {
  readonly metering: Counter = { window: -1, count: 0 }
  readonly analytics: Counter = { window: -1, count: 0 }
  readonly platform: Counter = { window: -1, count: 0 }
  errors?: Errors
  /** Current or last block: its end and its cooldown. */
  until = 0
  cooldown = 0
  lastSeen = 0
}

const SWEEP_EVERY_MS = 10_000

/**
 * Exact limits for one process: a counter per account, bucket and window, and the
 * error-pattern state per caller. Everything is synchronous, so a check-and-count is atomic.
 */
export class MemoryBackend implements RateLimitBackend {
  private readonly callers = new Map<CallerKey, CallerState>()
  private lastSweep = 0

  constructor(private readonly rules: ErrorPatternRules) {}

  hit(caller: CallerKey, bucket: RateLimitBucket, window: number, _limit: number, now: number): Hit {
    const state = this.state(caller, now)
    const counter = state[bucket]
    if (counter.window !== window) {
      counter.window = window
      counter.count = 0
    }
    if (state.until > now) return { count: counter.count, blockedUntil: state.until }
    counter.count++
    return { count: counter.count, blockedUntil: 0 }
  }

  blockedUntil(caller: CallerKey, now: number): number {
    const state = this.callers.get(caller)
    return state !== undefined && state.until > now ? state.until : 0
  }

  recordError(caller: CallerKey, now: number): void {
    const state = this.state(caller, now)
    // Answers still in flight when the block started do not count towards the next one.
    if (state.until > now) return
    const { threshold, windowMs } = this.rules
    const e = (state.errors ??= { times: new Float64Array(threshold), next: 0, filled: 0 })
    e.times[e.next] = now
    e.next = (e.next + 1) % threshold
    e.filled++
    if (e.filled < threshold || e.times[e.next] <= now - windowMs) return
    state.cooldown = nextCooldown(this.rules, now, state.until, state.cooldown)
    state.until = now + state.cooldown
    e.filled = 0
  }

  async close(): Promise<void> {
    this.callers.clear()
  }

  private state(caller: CallerKey, now: number): CallerState {
    if (now - this.lastSweep >= SWEEP_EVERY_MS) this.sweep(now)
    let state = this.callers.get(caller)
    if (state === undefined) {
      state = new CallerState()
      this.callers.set(caller, state)
    }
    state.lastSeen = now
    return state
  }

  /** Forgets callers with nothing left to remember: no current window, no recent errors, no block that could still double. */
  private sweep(now: number): void {
    this.lastSweep = now
    const quiet = now - Math.max(this.rules.windowMs, 1000)
    for (const [key, s] of this.callers) {
      if (s.lastSeen < quiet && s.until + s.cooldown < now) this.callers.delete(key)
    }
  }
}
