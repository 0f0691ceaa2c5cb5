import type { Database, Key } from 'lmdb'

interface Held<K, V> {
  key: K
  /** undefined: the row was removed. */
  value: V | undefined
}

/**
 * Rows of a shared table that another replica changed, read from Redis but not yet committed to
 * this replica's LMDB (src/store/redis/tables.ts). The component reads through this, so a change
 * (a revocation above all) applies as soon as it is read from Redis, not once this replica's write
 * queue and disk flush get to it: under ingest load those take far longer than the message.
 * Empty but for the moment between a change arriving and its local commit.
 */
export class PendingRows<K extends Key = Key, V = unknown> {
  /** By the row's key as JSON (the field of its Redis hash). */
  private readonly rows = new Map<string, Held<K, V>>()

  /** The row as this replica shows it: the pending one, else LMDB's. */
  get(db: Database<V, K>, key: K): V | undefined {
    if (this.rows.size === 0) return db.get(key)
    const held = this.rows.get(JSON.stringify(key))
    return held ? held.value : db.get(key)
  }

  /**
   * LMDB's rows with the pending ones over them: a changed row in place, a removed one left out,
   * a new one (of those `inRange` accepts) after the others.
   */
  *over(entries: Iterable<{ key: K; value: V }>, inRange: (key: K) => boolean = () => true): Generator<{ key: K; value: V }> {
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
    for (const [field, held] of this.rows) if (!seen.has(field) && held.value !== undefined && inRange(held.key)) yield { key: held.key, value: held.value }
  }

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
