import { createHash } from 'node:crypto'
import type { Database } from 'lmdb'
import type { PricingElement } from '../../model/pricing-element.js'
import type { Applied, TierQuantities, ToolCharge } from '../../ports/tiers.js'
import type { Store } from '../../store/store.js'
import { Decimal, SCALE, ZERO, cmpScaled, dec, formatScaled, parseQuantity, parseQuantityScaled, parseScaled, plusScaled, type Decimal as D } from './money.js'
import { elementStep, elementStepScaled, type ElementStep } from './tiers.js'

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

export const EMPTY_AGGREGATE: Aggregate = { n: 0, nv: 0, sum: '0', max: '0', distinct: 0 }

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

/** How a DISTINCT value is remembered: short values as they are, long ones by their SHA-256. */
export function distinctToken(v: unknown): string {
  const s = typeof v === 'string' ? 's:' + v : 'j:' + JSON.stringify(v)
  return s.length > 200 ? 'h:' + createHash('sha256').update(s).digest('hex') : s
}

/**
 * Period aggregates of tool pricing elements, in LMDB (DESIGN §6). Every update is a
 * read-modify-write inside one LMDB write transaction; lmdb-js serialises those (and LMDB
 * itself across processes), so concurrent events for one scope never lose an update.
 */
export class ToolAggregates implements TierQuantities {
  readonly aggregates: Database<Aggregate, Key>
  readonly distinct: Database<1, Key>

  constructor(private readonly store: Store) {
    this.aggregates = store.db<Key, Aggregate>('tool-aggregates', { sharedStructures: true })
    this.distinct = store.db<Key, 1>('tool-distinct')
  }

  /**
   * Applies each charge and returns its per-element costs, in order. Must run inside a write
   * transaction (see `apply`, or the caller's own, as `meterd reprice` does to update the record
   * in the same transaction).
   *
   * A charge whose transactionId the dedup table holds for another record within `dedupWindowMs`
   * is a duplicate of that record: the lmdb exporter will not store it, so it moves nothing and
   * gets the stored record's cost. The receiver answers such retries before they reach pricing;
   * this check, in the same transaction as the record's own dedup entry, is for a record stored
   * by another process in between. Without a window (no durable exporter sets one) nothing is
   * looked up.
   */
  applyInTransaction(charges: ToolCharge[], now: number, dedupWindowMs?: number): Applied[] {
    const out: Applied[] = []
    for (const c of charges) {
      const stored = dedupWindowMs === undefined ? undefined : this.storedTwin(c, dedupWindowMs, now)
      if (stored) {
        out.push(stored)
        continue
      }
      const applied: Applied = { parts: {}, quantities: {} }
      for (const el of c.elements) {
        const key = [...c.scope, el.name]
        const before = this.aggregates.get(key) ?? EMPTY_AGGREGATE
        const { after, step } = this.move(key, el, before, c.usageMetadata?.[el.name])
        applied.parts[el.name] = step.part
        applied.quantities[el.name] = step.quantity
        this.aggregates.put(key, after)
      }
      out.push(applied)
    }
    return out
  }

  /** What the stored record with the charge's transactionId cost, when it is another record. */
  private storedTwin(c: ToolCharge, windowMs: number, now: number): Applied | undefined {
    if (!c.transaction) return undefined
    const usage = this.store.usage
    const id = usage.findDuplicate(c.transaction.team, 'tool', c.transaction.id, windowMs, now)
    if (id === undefined || id === c.recordId) return undefined
    const cost = usage.get(id)?.cost
    return { parts: { ...cost?.parts }, quantities: { ...cost?.quantities } }
  }

  /** Applies charges in their own write transaction; resolves once committed (flushed with the record). */
  apply(charges: ToolCharge[], now: number, dedupWindowMs?: number): Promise<Applied[]> {
    let result: Applied[] = []
    return this.store.root.transaction(() => {
      result = this.applyInTransaction(charges, now, dedupWindowMs)
    }).then(() => result)
  }

  /** The aggregate after one event and what the event cost (DISTINCT looks its value up and records it). */
  private move(key: Key, el: PricingElement, a: Aggregate, raw: unknown): Move {
    if (el.aggregationType !== 'DISTINCT') return moveAggregate(el, a, raw)
    let fresh = false
    if (raw !== undefined && raw !== null) {
      const dk = [...key, distinctToken(raw)]
      if (this.distinct.get(dk) === undefined) {
        this.distinct.put(dk, 1)
        fresh = true
      }
    }
    return moveDistinct(el, a, fresh)
  }

  /** The current aggregate of an element (tests and reports). */
  get(scope: string[], element: string): Aggregate {
    return this.aggregates.get([...scope, element]) ?? EMPTY_AGGREGATE
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

/** One event's move of an element's aggregate, and its cost and quantity. */
export interface Move {
  after: Aggregate
  step: ElementStep
}

/**
 * An event with usageMetadata value `raw` applied to aggregate `a` of an element (every type
 * but DISTINCT, which needs the store): in BigInt for counts and for plain-decimal values
 * (nearly always), else in Decimal. Both give the same aggregate strings and costs
 * (test/pricing/fixed.test.ts).
 */
export function moveAggregate(el: PricingElement, a: Aggregate, raw: unknown): Move {
  if (el.aggregationType === 'COUNT') return { after: { ...a, n: a.n + 1 }, step: countStep(el, a.n, a.n + 1) }
  return moveScaled(el, a, raw) ?? moveDecimal(el, a, raw)
}

/** A DISTINCT element's move by one event; `fresh` when its value was not seen in the period before. */
export function moveDistinct(el: PricingElement, a: Aggregate, fresh: boolean): Move {
  const after: Aggregate = { ...a, n: a.n + 1, distinct: a.distinct + (fresh ? 1 : 0) }
  return { after, step: countStep(el, a.distinct, after.distinct) }
}

function countStep(el: PricingElement, before: number, after: number): ElementStep {
  return elementStepScaled(el, { n: BigInt(before), s: 0 }, { n: BigInt(after), s: 0 }) ?? elementStep(el, new Decimal(before), new Decimal(after))
}

/** SUM and MAXIMUM in BigInt; null for AVERAGE and for what only Decimal holds. */
export function moveScaled(el: PricingElement, a: Aggregate, raw: unknown): Move | null {
  if (el.aggregationType !== 'SUM' && el.aggregationType !== 'MAXIMUM') return null
  const v = parseQuantityScaled(raw)
  const sum = parseScaled(a.sum)
  const max = parseScaled(a.max)
  if (v === null || sum === null || max === null) return null
  const after: Aggregate = { ...a, n: a.n + 1 }
  let sumAfter = sum
  let maxAfter = max
  // Only a usable value moves the sum and the maximum.
  if (v !== undefined) {
    after.nv = a.nv + 1
    sumAfter = plusScaled(sum, v)
    after.sum = formatScaled(sumAfter)
    if (cmpScaled(v, max) > 0) {
      after.max = formatScaled(v)
      maxAfter = v
    }
  }
  const step = el.aggregationType === 'SUM' ? elementStepScaled(el, sum, sumAfter) : elementStepScaled(el, max, maxAfter)
  return step && { after, step }
}

/** Every type but DISTINCT in Decimal: quantityOf before and after, from the Decimals at hand. */
export function moveDecimal(el: PricingElement, a: Aggregate, raw: unknown): Move {
  const after: Aggregate = { ...a, n: a.n + 1 }
  if (el.aggregationType === 'COUNT') return { after, step: elementStep(el, new Decimal(a.n), new Decimal(after.n)) }
  // SUM, MAXIMUM and AVERAGE move with a usable value only.
  const v = parseQuantity(raw)
  const sum = dec(a.sum)
  let sumAfter = sum
  const max = dec(a.max)
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
      return { after, step: elementStep(el, sum, sumAfter) }
    case 'MAXIMUM':
      return { after, step: elementStep(el, max, maxAfter) }
    default:
      return { after, step: elementStep(el, average(sum, a.nv), average(sumAfter, after.nv)) }
  }
}
