import { compareKeys, type Database, type Key } from 'lmdb'
import type { TableView } from '../ports/tables.js'

interface Held<K, V> {
  key: K
  /** undefined: the row was removed. */
  value: V | undefined
}

/**
 * A table of this replica's LMDB as its component reads it (Store.view): through the rows of a
 * shared table that another replica changed, read from Redis but not yet committed here
 * (src/store/redis/tables.ts holds them). So a change (a revocation above all) applies as soon
 * as it is read from Redis, not once this replica's write queue and disk flush get to it: under
 * ingest load those take far longer than the message. No row is pending but for the moment
 * between a change arriving and its local commit, and a table that is not shared has none.
 */
export class LmdbTableView<K extends Key = Key, V = unknown> implements TableView<K, V> {
  /** By the row's key as JSON (the field of its Redis hash). */
  private readonly rows = new Map<string, Held<K, V>>()

  constructor(private readonly db: Database<V, K>) {}

  /** The row as this replica shows it: the pending one, else LMDB's. */
  get(key: K): V | undefined {
    if (this.rows.size === 0) return this.db.get(key)
    const held = this.rows.get(JSON.stringify(key))
    return held ? held.value : this.db.get(key)
  }

  /**
   * LMDB's rows in [start, end) (all of them without a range) with the pending ones over them: a
   * changed row in place, a removed one left out, a new one in the range after the others.
   */
  *range(range?: { start: K; end: K }): Generator<{ key: K; value: V }> {
    const entries = this.db.getRange(range ?? {})
    if (this.rows.size === 0) return yield* entries
    const seen = new Set<string>()
    for (const e of entries) {
      const field = JSON.stringify(e.key)
      const held = this.rows.get(field)
      if (!held) yield e
      else {
        seen.add(field)
        if (held.value !== undefined) yield { key: e.key, value: held.value }
      }
    }
    for (const [field, held] of this.rows) {
      if (seen.has(field) || held.value === undefined) continue
      if (range && (compareKeys(held.key, range.start) < 0 || compareKeys(held.key, range.end) >= 0)) continue
      yield { key: held.key, value: held.value }
    }
  }

  /** Whether another replica's row for this field is shown and not yet committed here. */
  has(field: string): boolean {
    return this.rows.has(field)
  }

  /** A row read from Redis, shown from now on; returns the mark its commit settles with. */
  hold(field: string, key: K, value: V | undefined): object {
    const held = { key, value }
    this.rows.set(field, held)
    return held
  }

  /** The commit that wrote `mark`'s row is visible in LMDB: LMDB shows it from now on, unless a later row came meanwhile. */
  settle(field: string, mark: object): void {
    if (this.rows.get(field) === mark) this.rows.delete(field)
  }
}
