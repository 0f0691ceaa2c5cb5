import { encodeRow } from '../../adapters/clickhouse/row.js'
import type { UsageRecord } from '../../model/usage-record.js'
import { RecordQueue, type DeadEntry } from '../../store/record-queue.js'
import type { Store } from '../../store/store.js'

/** A row waiting for ClickHouse, ready to insert. */
export interface QueuedRow {
  /** A TabSeparated line in the table's column order, without its version (src/adapters/clickhouse/row.ts). */
  line: string
  /** Its event_date (YYYY-MM-DD), to find it again by partition. */
  date: string
  queuedAt: number
  /**
   * A later version of a record's row (its cost changed after it was stored: `meterd reprice`):
   * the record's id and the version, the time of the change (ms). Absent for the row a record is
   * stored with (version 0, queued under the record's id).
   */
  id?: string
  version?: number
}

/** A row ClickHouse refused for good; `status` is ClickHouse's error code. */
export type DeadRow = DeadEntry<QueuedRow>

const PREFIX = 'clickhouse'

/**
 * A clickhouse exporter's persistent queue (src/store/record-queue.ts), `clickhouse-queue:<name>`
 * in the data directory, refused rows in `clickhouse-dead:<name>`. Other processes add rows to
 * it (workers, `meterd reprice`), so its depth is always read from LMDB.
 */
export class ClickHouseQueue extends RecordQueue<QueuedRow> {
  constructor(store: Store, name: string) {
    super(store, PREFIX, name, true)
  }
}

/** The queue key of a later version of a record's row: right after the record's own, in version order. */
export function versionKey(id: string, version: number): string {
  return `${id}~${String(version).padStart(16, '0')}`
}

/** The names of the clickhouse queues of this data directory: every clickhouse exporter that has run on it. */
export function queueNames(store: Store): string[] {
  const start = `${PREFIX}-queue:`
  const names: string[] = []
  for (const key of store.root.getKeys({ start, end: `${PREFIX}-queue;` })) if (typeof key === 'string' && key.startsWith(start)) names.push(key.slice(start.length))
  return names
}

/**
 * What `meterd reprice` calls inside the transaction that stores a record's new cost: the
 * record's new row goes into every clickhouse queue of the data directory in that same
 * transaction (so it is queued exactly when the new cost is stored, and survives kill -9), as
 * version `now` of the record. The exporter inserts it after the earlier version, and queries
 * read the highest. Undefined when no clickhouse exporter has run here.
 */
export function queueRepriced(store: Store, now: () => number): ((r: UsageRecord) => void) | undefined {
  const queues = queueNames(store).map((name) => new ClickHouseQueue(store, name))
  if (queues.length === 0) return undefined
  let last = 0
  return (r) => {
    // Increasing, so that two changes of one record within a millisecond keep their order.
    const version = (last = Math.max(last + 1, now()))
    const row = encodeRow(r)
    const item = { id: versionKey(r.id, version), value: { ...row, queuedAt: now(), id: r.id, version } }
    for (const q of queues) q.putInTransaction([item])
  }
}
