import type { StoredResponse } from '../core/consumer.js'
import { ApiError } from '../core/errors.js'
import type { UsageKind } from '../model/usage-record.js'
import type { Applied, ToolCharge } from '../domain/pricing/aggregates.js'

/**
 * What replicas of a gateway cluster share (docs/deployment.md, Gateway). Standalone and sidecar
 * daemons have none of these: each piece is then this process's LMDB alone (DedupStore,
 * ToolAggregates, the extensions' own databases). The Redis adapters are in src/store/redis.
 */
export interface SharedState {
  readonly dedup: SharedDedup
  readonly tiers: TierQuantities
  readonly tables: SharedTables
  readonly deliveries: DeliveryClaims
  close(): Promise<void>
}

/** A transactionId claim's outcome: this request stores the record, or another replica stored it under `id`. */
export type TransactionClaim = { claimed: true } | { claimed: false; id: string }

/** An Idempotency-Key claim's outcome: this request goes on, or the stored answer (with its body's hash). */
export type KeyClaim = { claimed: true } | { claimed: false; bodyHash: string; response?: StoredResponse }

/**
 * transactionId dedup and Idempotency-Keys across replicas. A claim is taken before the records
 * are stored (SET NX), turned into the stored record's id or answer once they are durable, and
 * released when the request fails, so a retry on any replica can store them.
 * Every method rejects with `sharedStateUnavailable()` when the shared store cannot be reached.
 */
export interface SharedDedup {
  /** Claims a team's transactionId for `id`; waits for another replica's claim to settle. */
  claimTransaction(team: string, kind: UsageKind, transactionId: string, id: string, windowMs: number): Promise<TransactionClaim>
  /** The record `id` is durable: the claim becomes the dedup entry for the window. */
  commitTransaction(team: string, kind: UsageKind, transactionId: string, id: string, windowMs: number): Promise<void>
  /** The request failed: the claim goes (only if it is still this one's). */
  releaseTransaction(team: string, kind: UsageKind, transactionId: string, id: string): Promise<void>
  claimKey(team: string, key: string, bodyHash: string, owner: string): Promise<KeyClaim>
  commitKey(team: string, key: string, bodyHash: string, owner: string, response: StoredResponse, ttlMs: number): Promise<void>
  releaseKey(team: string, key: string, owner: string): Promise<void>
}

/**
 * Period aggregates of tool pricing elements shared by every replica: each charge moves them
 * atomically, so an event's cost is C(after) − C(before) whichever replica prices it, and a
 * period's events add up to C(total) exactly. The LMDB ToolAggregates is the standalone twin.
 */
export interface TierQuantities {
  apply(charges: ToolCharge[], now: number): Promise<Applied[]>
}

/** A replicated table: rows keyed by a JSON-able key, mirrored into this replica's LMDB database. */
export interface SharedTable {
  /** LMDB database name: the rows are mirrored there, and that is what the component reads. */
  readonly db: string
  /** Runs after rows changed by another replica were written to the local database (cache invalidation). */
  changed(): void
}

/**
 * Keys, tools, export configurations and alert rules: written through (the local LMDB first,
 * then Redis), cached per replica, and brought to the other replicas by pub/sub within
 * milliseconds, with a periodic resync as a safety net.
 */
export interface SharedTables {
  /** Mirrors the tables now (Redis → LMDB, rows only this replica has → Redis) and follows changes from then on. */
  attach(tables: SharedTable[]): Promise<void>
  /** Rows of `db` this replica just wrote (the current LMDB value; absent = removed) go to the others. */
  wrote(db: string, keys: unknown[]): Promise<void>
}

/** One delivery per (endpoint, event) for the whole cluster. */
export interface DeliveryClaims {
  /** True when this delivery may be sent: no other delivery of the event to the endpoint holds the claim. */
  claim(configId: string, eventId: string, deliveryId: string): Promise<boolean>
}

/** The answer when correctness needs the shared state and it cannot be reached: nothing was stored. */
export function sharedStateUnavailable(): ApiError {
  return new ApiError(503, 'api_error', 'shared_state_unavailable', 'the shared state of the gateway cluster (Redis) is unreachable; nothing was stored; retry later', {
    headers: { 'retry-after': '1' },
  })
}
