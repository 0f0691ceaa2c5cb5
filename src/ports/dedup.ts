import type { BatchContext, StoredResponse } from '../core/consumer.js'
import type { UsageKind } from '../model/usage-record.js'

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
  guardReplay(ctx: BatchContext, team: string, key: string, ttlMs: number, now: number): void
}

/** The commit found the Idempotency-Key answered by another process: replay that answer. */
export class ReplayTaken extends Error {
  constructor() {
    super('the Idempotency-Key was answered by another process meanwhile')
  }
}
