import type { Database } from 'lmdb'
import type { Store } from './store.js'

/** What every queued entry carries: when it was acknowledged to the client (ms). */
export interface QueuedEntry {
  queuedAt: number
}

/** An entry refused for good by its destination, kept with why. */
export type DeadEntry<T extends QueuedEntry> = T & { status: number; error: string; at: number }

/**
 * An exporter's persistent queue (DESIGN §9), shared by the exporters that deliver records
 * elsewhere (upstream, clickhouse): entries by record id (time-sortable, so the oldest comes
 * first), written in the request's own LMDB transaction, so a 201 means the entry is here; an
 * entry leaves only in the transaction that records its destination's acknowledgement (or
 * moves it to the dead letters), so kill -9 at any point re-sends, never loses.
 */
export class RecordQueue<T extends QueuedEntry> {
  private readonly entries: Database<T, string>
  private readonly dead: Database<DeadEntry<T>, string>
  private count: number

  /**
   * `prefix`: the exporter type (names the LMDB databases `{prefix}-queue:{name}` and
   * `{prefix}-dead:{name}`). `shared`: other processes (workers) add and remove entries too, so
   * the depth is read from LMDB each time (O(1)) instead of counted here.
   */
  constructor(private readonly store: Store, prefix: string, name: string, private readonly shared = false) {
    this.entries = store.db(`${prefix}-queue:${name}`)
    this.dead = store.db(`${prefix}-dead:${name}`)
    this.count = this.entries.getCount()
  }

  get depth(): number {
    return this.shared ? (this.entries.getStats() as { entryCount: number }).entryCount : this.count
  }

  get deadLetters(): number {
    return this.dead.getCount()
  }

  /**
   * Inside the request's write transaction; returns how many entries are new, for `added`. An
   * entry put again under its id replaces it and is not counted again: the depth must never run
   * ahead of the queue, or it would look fuller than it is until it refused every request. (A
   * record two pipelines bring to one exporter reaches it once: src/host/fanout.ts, takeOnce.)
   */
  putInTransaction(items: { id: string; value: T }[]): number {
    let fresh = 0
    for (const { id, value } of items) {
      if (!this.entries.doesExist(id)) fresh++
      this.entries.put(id, value)
    }
    return fresh
  }

  /** After that transaction is durable. */
  added(n: number): void {
    this.count += n
  }

  /** The oldest entries, up to `limit`. */
  oldest(limit: number): { id: string; value: T }[] {
    return [...this.entries.getRange({ limit })].map(({ key, value }) => ({ id: key, value }))
  }

  /** Age (ms) of the oldest entry at `now`, 0 when empty. */
  oldestAge(now: number): number {
    for (const { value } of this.entries.getRange({ limit: 1 })) return Math.max(0, now - value.queuedAt)
    return 0
  }

  /** Removes acknowledged entries, moving refused ones to the dead letters, in one durable transaction. */
  async settle(acked: string[], refused: { id: string; status: number; error: string; at: number }[] = []): Promise<void> {
    let removed = 0
    await this.store.durable(
      this.store.root.transaction(() => {
        for (const id of acked) if (this.entries.doesExist(id)) this.entries.remove(id), removed++
        for (const r of refused) {
          const e = this.entries.get(r.id)
          if (!e) continue
          this.dead.put(r.id, { ...e, status: r.status, error: r.error, at: r.at })
          this.entries.remove(r.id)
          removed++
        }
      }),
    )
    this.count -= removed
  }
}

/**
 * The queues of `prefix` (`{prefix}-queue:{name}`) in the data directory that hold entries but
 * belong to none of `names`: an exporter renamed or removed from the config left them, and
 * nothing sends them.
 */
export function leftBehindQueues(store: Store, prefix: string, names: ReadonlySet<string>): { name: string; entries: number }[] {
  const start = `${prefix}-queue:`
  const out: { name: string; entries: number }[] = []
  for (const key of store.root.getKeys({ start, end: `${prefix}-queue;` })) {
    if (typeof key !== 'string' || !key.startsWith(start) || names.has(key.slice(start.length))) continue
    const entries = store.db(key).getCount()
    if (entries > 0) out.push({ name: key.slice(start.length), entries })
  }
  return out
}

/** Exponential backoff with jitter, reset by a success; a destination's Retry-After wins when given. */
export class Backoff {
  failures = 0

  constructor(private readonly o: { initialMs: number; maxMs: number; jitter: number }) {}

  next(retryAfterMs?: number): number {
    const n = this.failures++
    if (retryAfterMs !== undefined) return retryAfterMs
    const base = Math.min(this.o.maxMs, this.o.initialMs * 2 ** Math.min(n, 30))
    return Math.round(base * (1 + this.o.jitter * Math.random()))
  }

  reset(): void {
    this.failures = 0
  }
}

/**
 * The wait of a queue's sender loop: `sleep(ms)` resolves after `ms`, or at once when `wake()`
 * is called (records arrived, shutdown began) while `cutShort()` allows it — a backoff is not cut
 * short by new records, only by shutdown. One wake per sleep.
 */
export class Nap {
  private waking?: () => void

  constructor(private readonly cutShort: () => boolean) {}

  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms)
      function done(): void {
        clearTimeout(timer)
        resolve()
      }
      this.waking = () => {
        this.waking = undefined
        if (this.cutShort()) done()
      }
    })
  }

  wake(): void {
    this.waking?.()
  }
}
