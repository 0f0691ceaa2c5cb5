import type { StoredResponse } from '../core/consumer.js'
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
}
