import type { UsageKind, UsageRecord } from '../model/usage-record.js'
import type { UnitCarrier } from './write-unit.js'

/** An Idempotency-Key's answer as stored, replayed to a retry of the request. */
export interface StoredResponse {
  status: number
  body: string
}

/**
 * What ingest (src/domain/ingest) reads of the usage store to deduplicate, per team. The LMDB
 * UsageStore is one; the writes happen in the durable exporter's transaction
 * (BatchContext.idempotency, dedupWindowMs).
 */
export interface DedupStore {
  /** The id of the team's record stored under this transactionId within the window, if any. */
  findDuplicate(team: string, kind: UsageKind, transactionId: string, windowMs: number, now: number): string | undefined
  /** The answer stored for the team's Idempotency-Key within its ttl, if any. */
  findReplay(team: string, key: string, ttlMs: number, now: number): { bodyHash: string; response: StoredResponse } | undefined
  /**
   * Makes the batch's commit fail with ReplayTaken, before anything of it is written, when an
   * answer for the team's Idempotency-Key was stored since findReplay looked (by another worker
   * of the daemon: requests in flight in one process are held apart by ingest itself).
   */
  guardReplay(ctx: UnitCarrier, team: string, key: string, ttlMs: number, now: number): void
}

/** The commit found the Idempotency-Key answered by another process: replay that answer. */
export class ReplayTaken extends Error {
  constructor() {
    super('the Idempotency-Key was answered by another process meanwhile')
  }
}

/** A transactionId claim's outcome: this request stores the record, or another replica stored it under `id`. */
export type TransactionClaim = { claimed: true } | { claimed: false; id: string }

/** An Idempotency-Key claim's outcome: this request goes on, or the stored answer (with its body's hash). */
export type KeyClaim = { claimed: true } | { claimed: false; bodyHash: string; response?: StoredResponse }

/**
 * transactionId dedup and Idempotency-Keys across replicas. A claim is taken before the records
 * are stored (SET NX), turned into the stored record's id or answer once they are durable, and
 * released when the request fails, so a retry on any replica can store them.
 * Every method rejects with the 503 `shared_state_unavailable` (an ApiError: nothing was stored,
 * retry later) when the shared store cannot be reached.
 */
export interface SharedDedup {
  /** Claims a team's transactionId for `id`; waits for another replica's claim to settle. */
  claimTransaction(team: string, kind: UsageKind, transactionId: string, id: string, windowMs: number): Promise<TransactionClaim>
  /** The record `id` is durable: the claim becomes the dedup entry for the window. */
  commitTransaction(team: string, kind: UsageKind, transactionId: string, id: string, windowMs: number): Promise<void>
  /** The request failed: the claim goes (only if it is still this one's). */
  releaseTransaction(team: string, kind: UsageKind, transactionId: string, id: string): Promise<void>
  /**
   * Inside the request's write unit (a step of the lmdb exporter): notes the records whose
   * claims become dedup entries once they are committed, in the same transaction, so that a
   * claim its replica could not turn into the entry (Redis failed at that moment, or the replica
   * died between its commit and its answer) is turned later — at the next try, or when the
   * replica starts again — instead of expiring and letting a retry store the record twice.
   */
  noteInTransaction(records: UsageRecord[], windowMs: number, skip: ReadonlyMap<string, string>): void
  /** Turns the noted claims that are still pending into dedup entries, now and every few seconds (one process per data directory). */
  settleNoted(): void
  claimKey(team: string, key: string, bodyHash: string, owner: string): Promise<KeyClaim>
  commitKey(team: string, key: string, bodyHash: string, owner: string, response: StoredResponse, ttlMs: number): Promise<void>
  releaseKey(team: string, key: string, owner: string): Promise<void>
}
