import { createHash } from 'node:crypto'
import type { Database } from 'lmdb'
import type { Store } from '../store/store.js'
import { Decimal, SCALE, ZERO, dec, parseQuantity, type Decimal as D } from './money.js'
import { elementStep, type PricingElement } from './tiers.js'

/** Running statistics of one element over one billing period and scope. */
export interface Aggregate {
  /** Events (COUNT). */
  n: number
  /** Events that carried a usable value (the AVERAGE's denominator). */
  nv: number
  sum: string
  max: string
  /** Distinct values seen (DISTINCT); the values themselves live in `tool-distinct`. */
  distinct: number
}

const EMPTY: Aggregate = { n: 0, nv: 0, sum: '0', max: '0', distinct: 0 }

/** What an event contributed, remembered so a retried batch is never counted twice. */
export interface Applied {
  recordId: string
  at: number
  /** Cost per element (C(after) − C(before)), decimal strings. */
  parts: Record<string, string>
  quantities: Record<string, string>
}

/** One tool event to apply: its aggregate key prefix (scope + period) and the tool's elements. */
export interface ToolCharge {
  recordId: string
  /** `account\0transactionId` when the event has one, else undefined (then the record id is the key). */
  dedupKey?: string
  /** [team, ...scope values, toolId, period]. */
  scope: string[]
  elements: PricingElement[]
  usageMetadata: Record<string, unknown> | undefined
}

type Key = string[]

/** The quantity an element's aggregate stands for: C is taken of this. */
export function quantityOf(el: PricingElement, a: Aggregate): D {
  switch (el.aggregationType) {
    case 'COUNT':
      return new Decimal(a.n)
    case 'SUM':
      return new Decimal(a.sum)
    case 'MAXIMUM':
      return new Decimal(a.max)
    case 'DISTINCT':
      return new Decimal(a.distinct)
    case 'AVERAGE':
      return average(new Decimal(a.sum), a.nv)
  }
}

function average(sum: D, n: number): D {
  return n === 0 ? ZERO : sum.div(n).toDecimalPlaces(SCALE, Decimal.ROUND_HALF_EVEN)
}

function distinctToken(v: unknown): string {
  const s = typeof v === 'string' ? 's:' + v : 'j:' + JSON.stringify(v)
  return s.length > 200 ? 'h:' + createHash('sha256').update(s).digest('hex') : s
}

/**
 * Period aggregates of tool pricing elements, in LMDB (DESIGN §6). Every update is a
 * read-modify-write inside one LMDB write transaction; lmdb-js serialises those (and LMDB
 * itself across processes), so concurrent events for one scope never lose an update.
 */
export class ToolAggregates {
  readonly aggregates: Database<Aggregate, Key>
  readonly distinct: Database<1, Key>
  readonly applied: Database<Applied, Key>

  constructor(private readonly store: Store) {
    this.aggregates = store.db<Key, Aggregate>('tool-aggregates')
    this.distinct = store.db<Key, 1>('tool-distinct')
    this.applied = store.db<Key, Applied>('tool-applied')
  }

  appliedKey(c: Pick<ToolCharge, 'recordId' | 'dedupKey'>): Key {
    return c.dedupKey !== undefined ? ['tx', c.dedupKey] : ['id', c.recordId]
  }

  /**
   * Applies each charge and returns its per-element costs, in order. Must run inside a write
   * transaction (see `apply`, or the caller's own, as `meterd reprice` does to update the record
   * in the same transaction). A charge already applied returns what it cost the first time.
   */
  applyInTransaction(charges: ToolCharge[], now: number, count = true): Applied[] {
    const out: Applied[] = []
    for (const c of charges) {
      const ak = this.appliedKey(c)
      const prior = this.applied.get(ak)
      if (prior) {
        out.push(prior)
        continue
      }
      const applied: Applied = { recordId: c.recordId, at: now, parts: {}, quantities: {} }
      for (const el of c.elements) {
        const key = [...c.scope, el.name]
        const before = this.aggregates.get(key) ?? EMPTY
        const { after, qBefore, qAfter } = this.next(key, el, before, c.usageMetadata)
        const step = elementStep(el, qBefore, qAfter)
        applied.parts[el.name] = step.part
        applied.quantities[el.name] = step.quantity
        if (count) this.aggregates.put(key, after)
      }
      if (count) this.applied.put(ak, applied)
      out.push(applied)
    }
    return out
  }

  /** Applies charges in their own write transaction; resolves once committed (flushed with the record). */
  apply(charges: ToolCharge[], now: number): Promise<Applied[]> {
    let result: Applied[] = []
    return this.store.root.transaction(() => {
      result = this.applyInTransaction(charges, now)
    }).then(() => result)
  }

  /**
   * The aggregate after one event, and the quantity C is taken of before and after it
   * (quantityOf of each, computed from the Decimals at hand rather than re-parsed).
   */
  private next(key: Key, el: PricingElement, a: Aggregate, meta: Record<string, unknown> | undefined): { after: Aggregate; qBefore: D; qAfter: D } {
    const after: Aggregate = { ...a, n: a.n + 1 }
    if (el.aggregationType === 'COUNT') return { after, qBefore: new Decimal(a.n), qAfter: new Decimal(after.n) }
    const raw = meta?.[el.name]
    if (el.aggregationType === 'DISTINCT') {
      if (raw !== undefined && raw !== null) {
        const dk = [...key, distinctToken(raw)]
        if (this.distinct.get(dk) === undefined) {
          this.distinct.put(dk, 1)
          after.distinct = a.distinct + 1
        }
      }
      return { after, qBefore: new Decimal(a.distinct), qAfter: new Decimal(after.distinct) }
    }
    // SUM, MAXIMUM and AVERAGE move with a usable value only.
    const v = parseQuantity(raw)
    const sum = dec(a.sum)
    let sumAfter = sum
    const max = el.aggregationType === 'MAXIMUM' ? dec(a.max) : ZERO
    let maxAfter = max
    if (v !== undefined) {
      after.nv = a.nv + 1
      sumAfter = sum.plus(v)
      after.sum = sumAfter.toFixed()
      if (v.gt(a.max)) {
        after.max = v.toFixed()
        maxAfter = v
      }
    }
    switch (el.aggregationType) {
      case 'SUM':
        return { after, qBefore: sum, qAfter: sumAfter }
      case 'MAXIMUM':
        return { after, qBefore: max, qAfter: maxAfter }
      case 'AVERAGE':
        return { after, qBefore: average(sum, a.nv), qAfter: average(sumAfter, after.nv) }
    }
  }

  /** The current aggregate of an element (tests and reports). */
  get(scope: string[], element: string): Aggregate {
    return this.aggregates.get([...scope, element]) ?? EMPTY
  }

  /** Forgets applied-event entries older than `ttlMs` (they only guard retries). */
  async sweep(now: number, ttlMs: number): Promise<number> {
    let n = 0
    await this.store.root.transaction(() => {
      for (const { key, value } of this.applied.getRange({})) if (now - value.at >= ttlMs) this.applied.remove(key), n++
    })
    return n
  }
}

/** The billing period an event time falls in, UTC. */
export type BillingPeriod = 'month' | 'week' | 'day' | 'year'

export function periodOf(eventTime: string, unit: BillingPeriod): string {
  // Event times are stored as toISOString spells them (validate processor): the calendar
  // periods are prefixes of it.
  if (unit !== 'week' && eventTime.length === 24 && eventTime.endsWith('Z')) return eventTime.slice(0, unit === 'year' ? 4 : unit === 'month' ? 7 : 10)
  const d = new Date(eventTime)
  const iso = d.toISOString()
  switch (unit) {
    case 'year':
      return iso.slice(0, 4)
    case 'month':
      return iso.slice(0, 7)
    case 'day':
      return iso.slice(0, 10)
    case 'week': {
      // ISO week starting Monday, named by its Monday.
      const day = (d.getUTCDay() + 6) % 7
      return 'W' + new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() - day)).toISOString().slice(0, 10)
    }
  }
}
