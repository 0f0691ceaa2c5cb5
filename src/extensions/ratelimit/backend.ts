import type { RateLimitBucket } from '../../transport/admission/index.js'

/**
 * Who is counted: `a:<account>` for an authenticated caller, `ip:<address>` for an
 * unauthenticated one (error-pattern accounting only; unauthenticated requests use no bucket).
 */
export type CallerKey = string

/** The outcome of counting one request. */
export interface Hit {
  /** Requests counted in the bucket's current window, this one included (when blocked: the count so far). */
  count: number
  /** Epoch ms when the caller's error-pattern block ends; 0 when it is not blocked. */
  blockedUntil: number
}

/** Error-pattern thresholds, in milliseconds. */
export interface ErrorPatternRules {
  threshold: number
  windowMs: number
  initialCooldownMs: number
  maxCooldownMs: number
}

/**
 * Where windows and blocks live. `hit` is one atomic step: a blocked caller is not counted
 * (blocked requests do not consume the bucket), otherwise the window's counter goes up by one.
 * Windows are epoch seconds: `window = floor(now / 1000)`.
 */
export interface RateLimitBackend {
  hit(caller: CallerKey, bucket: RateLimitBucket, window: number, limit: number, now: number): Hit | Promise<Hit>
  /** Epoch ms when the caller's block ends, 0 when not blocked. */
  blockedUntil(caller: CallerKey, now: number): number | Promise<number>
  /** Counts one 4xx answer (429 excluded) to the caller; may start a block. */
  recordError(caller: CallerKey, now: number): void
  close(): Promise<void>
}

/**
 * The cooldown of a new block: the first is `initialCooldownMs`; a violation within one
 * cooldown length after the previous block ended doubles the previous cooldown, up to the cap.
 */
export function nextCooldown(rules: ErrorPatternRules, now: number, prevUntil: number, prevCooldown: number): number {
  if (prevCooldown > 0 && now - prevUntil <= prevCooldown) return Math.min(prevCooldown * 2, rules.maxCooldownMs)
  return rules.initialCooldownMs
}
