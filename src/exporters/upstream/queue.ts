import type { Database } from 'lmdb'
import type { UsageKind } from '../../model/usage-record.js'
import type { Store } from '../../store/store.js'

/** A record waiting for the upstream: the body to send and where to send it. */
export interface Queued {
  kind: UsageKind
  body: Record<string, unknown>
  /** When the sidecar acknowledged it (ms). */
  queuedAt: number
}

/** A record the upstream refused for good (a 4xx other than 401/403/404/408/409/429). */
export interface DeadLetter extends Queued {
  status: number
  error: string
  at: number
}

/**
 * The exporter's persistent queue (DESIGN §9): records by their id (time-sortable, so the
 * oldest comes first), written in the request's own LMDB transaction, so a 201 from the sidecar
 * means the record is here; an entry leaves only in the transaction that records the upstream's
 * acknowledgement (or moves it to the dead letters), so kill -9 at any point re-sends, never loses.
 */
export class UpstreamQueue {
  private readonly entries: Database<Queued, string>
  private readonly dead: Database<DeadLetter, string>
  private count: number

  constructor(private readonly store: Store, name: string) {
    this.entries = store.db(`upstream-queue:${name}`)
    this.dead = store.db(`upstream-dead:${name}`)
    this.count = this.entries.getCount()
  }

  get depth(): number {
    return this.count
  }

  get deadLetters(): number {
    return this.dead.getCount()
  }

  /** Inside the request's write transaction. */
  putInTransaction(items: { id: string; value: Queued }[]): void {
    for (const { id, value } of items) this.entries.put(id, value)
  }

  /** After that transaction is durable. */
  added(n: number): void {
    this.count += n
  }

  /** The oldest entries, up to `limit`. */
  oldest(limit: number): { id: string; value: Queued }[] {
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
