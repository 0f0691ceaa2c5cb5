import type { UsageKind, UsageRecord } from '../model/usage-record.js'
import type { DedupStore, StoredResponse } from './dedup.js'

export interface ListQuery {
  team: string
  kind: UsageKind
  transactionId?: string
  traceId?: string
  toolId?: string
  /** Inclusive ISO lower bound on event time. */
  from?: string
  /** Exclusive ISO upper bound on event time. */
  to?: string
  page: number
  size: number
}

export interface ListResult {
  records: UsageRecord[]
  total: number
}

export interface WriteOptions {
  dedupWindowMs: number
  now: number
  /** The Idempotency-Key replay entry; its response is rendered with the ids this write kept. */
  idempotency?: { team: string; key: string; bodyHash: string; at: number; response: (duplicates: ReadonlyMap<string, string>) => StoredResponse }
}

/** A consistent view of the stored records, held open until released (the analytics rebuild's scan). */
export interface RecordSnapshot {
  /** True when the record was stored when the snapshot was taken. */
  has(id: string): boolean
  release(): void
}

/**
 * The usage records (DESIGN §9): what the components that store and read them depend on (the
 * lmdb exporter, the read API, the analytics exporter, the alert evaluator, ingest's dedup), so
 * none of them reaches into the store's databases. UsageStore (src/store/usage-store.ts) is the
 * LMDB adapter, in every mode: a gateway replica keeps its records in its own LMDB, and the
 * cluster's records are in ClickHouse (the clickhouse exporter and the analytics backend).
 */
export interface UsageRecords extends DedupStore {
  /**
   * Puts a batch's records, their indexes and their dedup/replay entries as one step of the
   * request's write unit (one commit per request): must run inside its write transaction,
   * synchronously. Records whose transactionId is already stored within the window are skipped;
   * the returned map gives, for those, the id that was kept (a shared empty map when none).
   */
  writeInTransaction(records: UsageRecord[], opts: WriteOptions): ReadonlyMap<string, string>
  get(id: string): UsageRecord | undefined
  /** A team's records of one kind, newest first, one page at a time (by transactionId, traceId, toolId or time). */
  list(q: ListQuery): ListResult
  /** A team's records of both kinds whose event time is in [from, to) (ISO), oldest first within a kind. */
  inWindow(team: string, from: string, to: string): Iterable<UsageRecord>
  /** A team's records of one kind stored unpriced, newest first, event time in [from, to). */
  unpriced(team: string, kind: UsageKind, from?: string, to?: string): Iterable<UsageRecord>
  /** How many records (every team) are stored unpriced: one native count. */
  unpricedCount(): number
  /** The ids of the records (every team) stored unpriced. */
  unpricedIds(): Iterable<string>
  /** A snapshot for a scan that must not meet records committed after it started. */
  snapshot(): RecordSnapshot
  /** Every record by id, from just after `after`, at most `limit` of them (from `snapshot` when given). */
  scan(after: string | undefined, limit: number, snapshot?: RecordSnapshot): Iterable<UsageRecord>
  /** Drops Idempotency-Key replay entries older than their window; resolves with how many went. */
  sweep(now: number, replayTtlMs: number): Promise<number>
}
