import { Decimal, ZERO, round, type Decimal as D } from './money.js'

export const AGGREGATION_TYPES = ['SUM', 'COUNT', 'AVERAGE', 'MAXIMUM', 'DISTINCT'] as const
export type AggregationType = (typeof AGGREGATION_TYPES)[number]
export const TIERS_MODES = ['volume', 'graduated'] as const
export type TiersMode = (typeof TIERS_MODES)[number]

/** A tier as stored: prices as decimal strings; `upTo` null = unlimited. */
export interface Tier {
  upTo: string | null
  unitPrice: string
}

/** SPEC's pricing element, as stored (decimal strings, validated). */
export interface PricingElement {
  name: string
  unitPrice: string
  aggregationType: AggregationType
  tiersMode: TiersMode
  tiers: Tier[]
}

// Tier prices and limits arrive as numbers or decimal strings; each distinct one is parsed once.
const parsed = new Map<string | number, D>()
function d(v: string | number): D {
  let x = parsed.get(v)
  if (x === undefined) {
    if (parsed.size >= 10_000) parsed.clear()
    parsed.set(v, (x = new Decimal(v)))
  }
  return x
}

// The last two charges computed per element: an event's C(before) is the C(after) that the
// previous event on the same aggregate has just computed. Elements are immutable (a tool
// update makes new ones), so identity is a safe key.
const recent = new WeakMap<PricingElement, { q: string; c: D }[]>()

/**
 * The period charge C(q) of an element (DESIGN §6), rounded to the money scale:
 * flat `unitPrice × q`; `volume` prices every unit at the tier q falls in (upTo inclusive);
 * `graduated` prices each unit in its own tier. Past a finite last tier, its price goes on.
 * Because C is rounded before any difference is taken, C(after) − C(before) is exact and
 * per-event costs add up to the period charge to the last digit.
 */
export function periodCharge(el: PricingElement, q: D): D {
  const key = q.toString()
  let memo = recent.get(el)
  if (memo) for (const m of memo) if (m.q === key) return m.c
  const c = computeCharge(el, q)
  if (!memo) recent.set(el, (memo = []))
  memo.unshift({ q: key, c })
  if (memo.length > 2) memo.pop()
  return c
}

function computeCharge(el: PricingElement, q: D): D {
  if (q.lte(0)) return ZERO
  if (el.tiers.length === 0) return round(d(el.unitPrice).times(q))
  if (el.tiersMode === 'volume') {
    let tier = el.tiers[el.tiers.length - 1]
    for (const t of el.tiers) {
      if (t.upTo === null || q.lte(d(t.upTo))) {
        tier = t
        break
      }
    }
    return round(d(tier.unitPrice).times(q))
  }
  let total = ZERO
  let below = ZERO
  for (let i = 0; i < el.tiers.length; i++) {
    const t = el.tiers[i]
    const last = i === el.tiers.length - 1
    const top = t.upTo === null || last ? q : Decimal.min(q, d(t.upTo))
    if (top.gt(below)) total = total.plus(top.minus(below).times(d(t.unitPrice)))
    if (t.upTo !== null) below = d(t.upTo)
    if (below.gte(q)) break
  }
  return round(total)
}
