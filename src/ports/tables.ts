/**
 * A table as its component reads it (Store.view): this replica's rows, and in a gateway cluster
 * another replica's changes to them, shown from the moment they are read from the shared store,
 * before they are committed here.
 */
export interface TableView<K, V> {
  /** The row as this replica shows it. */
  get(key: K): V | undefined
  /** The rows in [start, end) (every row without a range) in key order; a row another replica added comes after the others. */
  range(range?: { start: K; end: K }): Iterable<{ key: K; value: V }>
}

/**
 * A replicated table: rows keyed by a JSON-able key, mirrored into this replica's LMDB database,
 * whose view (TableView) shows another replica's changes before their local commit.
 */
export interface SharedTable {
  /** LMDB database name: the rows are mirrored there. */
  readonly db: string
  /** Runs once rows changed by another replica are shown (pending, or already in the local database): cache invalidation. */
  changed(): void
}

/**
 * Keys, tools, export configurations and alert rules: written through (the local LMDB first,
 * then Redis), cached per replica, and brought to the other replicas by pub/sub within
 * milliseconds (shown there before their local commit), with a periodic resync as a safety net.
 */
export interface SharedTables {
  /**
   * Resolves when the shared store answers; rejects with the 503 `shared_state_unavailable` (with a
   * Retry-After) when it cannot be reached. A write of a table calls it before its local commit,
   * so a change is refused rather than kept by one replica alone while Redis is down.
   */
  writable(): Promise<void>
  /** Mirrors the tables now (Redis → LMDB, rows only this replica has → Redis) and follows changes from then on. */
  attach(tables: SharedTable[]): Promise<void>
  /** Rows of `db` this replica just wrote (the current LMDB value; absent = removed) go to the others. */
  wrote(db: string, keys: unknown[]): Promise<void>
  /**
   * Replaces the row `key` of `db`, read here as `read`, with `value` when the cluster still holds
   * `read` (checked in Redis, where every replica's change lands first), then commits it to the
   * local LMDB; otherwise nothing is written and the outcome says why (Replaced). Rejects with the
   * 503 `shared_state_unavailable` when Redis cannot be reached.
   */
  replace<V>(db: string, key: unknown, read: V, value: V): Promise<Replaced<V>>
  /**
   * replace() of several rows (of one or more tables) at once: all are written when the cluster
   * still holds every row as read, none otherwise. A row `read` as undefined must not exist (a
   * create-if-absent); a `value` of undefined removes the row. Rows the change only depends on are
   * passed with `value` equal to `read`. With `limit`, the first row is a new row of a team,
   * written only while the team holds fewer than `limit.max` rows of its table (`limited`
   * otherwise), counted across the cluster.
   */
  replaceRows(rows: RowChange[], limit?: TeamLimit): Promise<RowsReplaced>
}

/** The most rows of a table one team may hold (its rows have a `team` field). */
export interface TeamLimit {
  team: string
  max: number
}

/** One row of SharedTables.replaceRows: undefined `read` or `value` for no row. */
export interface RowChange {
  db: string
  key: unknown
  read: unknown
  value: unknown
}

/**
 * What replaceRows did: `changed` when a row is no longer as read, with each row as the cluster
 * holds it now, in the order given (`{ value: undefined }` when removed; undefined when the cluster
 * has no copy of it yet, which is no change: a row made here while Redis was down).
 */
export type RowsReplaced = { outcome: 'replaced' } | { outcome: 'limited' } | { outcome: 'changed'; now: ({ value: unknown } | undefined)[] }

/**
 * What a conditional replacement of a row did: `gone` when the row was removed meanwhile, `changed`
 * with the row as it is now when another write committed since it was read (the caller merges its
 * change over `now` and tries again).
 */
export type Replaced<V> = { outcome: 'replaced' } | { outcome: 'gone' } | { outcome: 'changed'; now: V }
