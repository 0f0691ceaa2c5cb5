import type { Database } from 'lmdb'
import type { Store } from '../../store/store.js'
import type { Delivery, WebhookEvent } from './model.js'

const MAX_KEPT_ATTEMPTS = 20

/**
 * The persistent delivery queue, in LMDB next to the usage records (DESIGN §9):
 * - `webhook_deliveries`: id → Delivery (the body bytes, status, attempts)
 * - `webhook_due`: [nextAttemptAt, id] → configId, one entry per pending delivery;
 *   an entry leaves only in the transaction that records the attempt's outcome, so a
 *   delivery in flight at kill -9 is attempted again after restart (at least once)
 * - `webhook_by_config`: [configId, id] → null, for listing and recovery
 * - `webhook_batch`: [configId, eventId] → event waiting to go out in a `usage.batch`
 */
export class DeliveryQueue {
  readonly deliveries: Database<Delivery, string>
  readonly due: Database<string, [number, string]>
  readonly byConfig: Database<null, [string, string]>
  readonly batch: Database<{ event: WebhookEvent; at: number }, [string, string]>

  constructor(private readonly store: Store) {
    this.deliveries = store.db('webhook_deliveries')
    this.due = store.db('webhook_due') as any
    this.byConfig = store.db('webhook_by_config') as any
    this.batch = store.db('webhook_batch') as any
  }

  /** Puts deliveries (and batch-buffer entries) in one transaction; resolves once on disk. */
  async enqueue(deliveries: Delivery[], buffered: { configId: string; event: WebhookEvent; at: number }[] = []): Promise<void> {
    if (deliveries.length === 0 && buffered.length === 0) return
    await this.store.durable(this.store.root.transaction(() => this.putInTransaction(deliveries, buffered)))
  }

  /** enqueue()'s puts, inside the caller's write transaction. */
  putInTransaction(deliveries: Delivery[], buffered: { configId: string; event: WebhookEvent; at: number }[]): void {
    for (const d of deliveries) this.putNew(d)
    for (const b of buffered) this.batch.put([b.configId, b.event.id], { event: b.event, at: b.at })
  }

  private putNew(d: Delivery): void {
    this.deliveries.put(d.id, d)
    this.byConfig.put([d.configId, d.id], null)
    if (d.status === 'pending') this.due.put([d.nextAttemptAt!, d.id], d.configId)
  }

  get(id: string): Delivery | undefined {
    return this.deliveries.get(id)
  }

  /** Pending deliveries due at or before `now`, oldest first. */
  *dueUntil(now: number, limit: number): Generator<{ at: number; id: string; configId: string }> {
    for (const { key, value } of this.due.getRange({ start: [0], end: [now + 1], limit })) {
      yield { at: key[0], id: key[1], configId: value }
    }
  }

  get depth(): number {
    return this.due.getCount()
  }

  /** Records an attempt's outcome: moves the due entry, or removes it when the delivery is settled. */
  async settle(d: Delivery, previousDueAt: number): Promise<void> {
    if (d.attempts.length > MAX_KEPT_ATTEMPTS) d.attempts = d.attempts.slice(-MAX_KEPT_ATTEMPTS)
    await this.store.root.transaction(() => {
      this.due.remove([previousDueAt, d.id])
      this.deliveries.put(d.id, d)
      if (d.status === 'pending') this.due.put([d.nextAttemptAt!, d.id], d.configId)
    })
  }

  /** A configuration's deliveries, newest first. */
  list(configId: string, opts: { limit: number; offset: number; status?: string }): { items: Delivery[]; total: number } {
    const items: Delivery[] = []
    let total = 0
    for (const { key } of this.byConfig.getRange({ start: [configId, '\uffff'], end: [configId, ''], reverse: true })) {
      const d = this.deliveries.get(key[1])
      if (!d || (opts.status && d.status !== opts.status)) continue
      if (total >= opts.offset && items.length < opts.limit) items.push(d)
      total++
    }
    return { items, total }
  }

  /** Re-queues a configuration's failed and dead-lettered deliveries updated at or after `since`. */
  async recover(configId: string, since: number, now: number): Promise<string[]> {
    const ids: string[] = []
    await this.store.durable(
      this.store.root.transaction(() => {
        for (const { key } of this.byConfig.getRange({ start: [configId, ''], end: [configId, '\uffff'] })) {
          const d = this.deliveries.get(key[1])
          if (!d || (d.status !== 'failed' && d.status !== 'dead_lettered') || d.updatedAt < since) continue
          d.status = 'pending'
          d.attemptCount = 0
          d.nextAttemptAt = now
          d.updatedAt = now
          this.deliveries.put(d.id, d)
          this.due.put([now, d.id], d.configId)
          ids.push(d.id)
        }
      }),
    )
    return ids
  }

  /** Events waiting for a batch, grouped by configuration, with the oldest enqueue time. */
  batches(): Map<string, { count: number; oldest: number }> {
    const out = new Map<string, { count: number; oldest: number }>()
    for (const { key, value } of this.batch.getRange({})) {
      const b = out.get(key[0])
      if (b) {
        b.count++
        b.oldest = Math.min(b.oldest, value.at)
      } else out.set(key[0], { count: 1, oldest: value.at })
    }
    return out
  }

  /** Takes up to `max` buffered events of a configuration and turns them into one delivery, atomically. */
  async flushBatch(configId: string, max: number, make: (events: WebhookEvent[]) => Delivery): Promise<Delivery | undefined> {
    let made: Delivery | undefined
    await this.store.durable(
      this.store.root.transaction(() => {
        const events: WebhookEvent[] = []
        const keys: [string, string][] = []
        for (const { key, value } of this.batch.getRange({ start: [configId, ''], end: [configId, '\uffff'], limit: max })) {
          events.push(value.event)
          keys.push(key)
        }
        if (events.length === 0) return
        made = make(events)
        for (const k of keys) this.batch.remove(k)
        this.putNew(made)
      }),
    )
    return made
  }

  /** Removes everything queued for a deleted configuration. */
  async dropConfig(configId: string): Promise<void> {
    await this.store.root.transaction(() => {
      for (const { key } of this.byConfig.getRange({ start: [configId, ''], end: [configId, '\uffff'] })) {
        const d = this.deliveries.get(key[1])
        if (d?.status === 'pending') this.due.remove([d.nextAttemptAt!, d.id])
        this.deliveries.remove(key[1])
        this.byConfig.remove(key)
      }
      for (const { key } of this.batch.getRange({ start: [configId, ''], end: [configId, '\uffff'] })) this.batch.remove(key)
    })
  }
}
