import { ApiError, conflict, invalid } from '../../core/errors.js'
import type { DedupStore, StoredResponse } from '../../ports/dedup.js'
import type { InFlight } from './in-flight.js'

/** DESIGN §3: 1–255 printable ASCII characters, no spaces. */
const KEY = /^[!-~]{1,255}$/

/** A request's Idempotency-Key (REST only), with what identifies its body and renders its answer. */
export interface IdempotencyKey {
  key: string
  /** A digest of what the request asks (kind and body bytes): the same key with another body is a 409. */
  bodyHash: string
  /** The answer to replay, given the ids answered (in item order) and the records' `created` time. */
  render(ids: readonly string[], created: string): StoredResponse
}

export const idempotencyMismatch = (): ApiError =>
  new ApiError(409, 'conflict_error', 'idempotency_key_mismatch', 'this Idempotency-Key was used with a different request body', {
    headers: { 'x-should-retry': 'false' },
  })

export const idempotencyInProgress = (): ApiError =>
  conflict('idempotency_key_in_progress', 'a request with this Idempotency-Key is still being processed', { 'retry-after': '1' })

/**
 * Idempotency-Key per team (DESIGN §3): a stored answer is replayed, another body is a 409
 * `idempotency_key_mismatch`, a request still in flight with the key is a 409
 * `idempotency_key_in_progress` with Retry-After: 1.
 */
export class IdempotencyKeys {
  constructor(private readonly store: DedupStore, private readonly inFlight: InFlight, readonly ttlMs: number) {}

  /**
   * The stored answer to replay, or undefined when the request is new: then the key is held as
   * in flight until `end`. Throws the 400 and 409s.
   */
  begin(team: string, idem: IdempotencyKey, now: number): StoredResponse | undefined {
    if (!KEY.test(idem.key))
      throw invalid('invalid_idempotency_key', 'Idempotency-Key must be 1 to 255 printable ASCII characters without spaces', 'Idempotency-Key')
    const stored = this.store.findReplay(team, idem.key, this.ttlMs, now)
    if (stored) {
      if (stored.bodyHash !== idem.bodyHash) throw idempotencyMismatch()
      return stored.response
    }
    const held = `${team}\0${idem.key}`
    const inFlight = this.inFlight.keys.get(held)
    if (inFlight !== undefined) {
      if (inFlight !== idem.bodyHash) throw idempotencyMismatch()
      throw idempotencyInProgress()
    }
    this.inFlight.keys.set(held, idem.bodyHash)
    return undefined
  }

  end(team: string, idem: IdempotencyKey): void {
    this.inFlight.keys.delete(`${team}\0${idem.key}`)
  }
}
