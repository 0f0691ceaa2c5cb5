import { Decimal, SCALED_ZERO, ZERO, cmpScaled, minusScaled, money, moneyOfUnits, mulScaled, plusScaled, round, roundScaled, scaledOf, type Decimal as D, type Scaled } from './money.js'
import type { PricingElement } from '../../model/pricing-element.js'

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

/**
 * The period charge C(q) of an element (DESIGN §6), rounded to the money scale:
 * flat `unitPrice × q`; `volume` prices every unit at the tier q falls in (upTo inclusive);
 * `graduated` prices each unit in its own tier. Past a finite last tier, its price goes on.
 * Because C is rounded before any difference is taken, C(after) − C(before) is exact and
 * per-event costs add up to the period charge to the last digit. (The Decimal reference;
 * events are charged by chargeUnits below, its BigInt twin.)
 */
export function periodCharge(el: PricingElement, q: D): D {
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

/** What one event moved an element by: its cost C(after) − C(before) and its quantity, as money strings. */
export interface ElementStep {
  part: string
  quantity: string
}

/**
 * An event's cost and quantity for one element, from the quantities C is taken of before and
 * after it. In BigInt when the tiers and quantities allow it (40 decimal places at most, nearly
 * always), else through periodCharge in Decimal; both give the same strings
 * (test/pricing/fixed.test.ts).
 */
export function elementStep(el: PricingElement, qBefore: D, qAfter: D): ElementStep {
  const b = scaledOf(qBefore)
  const a = scaledOf(qAfter)
  return (b && a && elementStepScaled(el, b, a)) || { part: money(periodCharge(el, qAfter).minus(periodCharge(el, qBefore))), quantity: money(qAfter.minus(qBefore)) }
}

/** elementStep from Scaled quantities; null when the element's prices have no Scaled form. */
export function elementStepScaled(el: PricingElement, qBefore: Scaled, qAfter: Scaled): ElementStep | null {
  const cb = chargeUnits(el, qBefore)
  const ca = cb === null ? null : chargeUnits(el, qAfter)
  if (cb === null || ca === null) return null
  return { part: moneyOfUnits(ca - cb), quantity: moneyOfUnits(roundScaled(minusScaled(qAfter, qBefore))) }
}

interface ScaledTiers {
  unitPrice: Scaled
  tiers: { upTo: Scaled | null; price: Scaled }[]
}

const scaledTiers = new WeakMap<PricingElement, ScaledTiers | null>()

/** An element's prices and limits as Scaled (once per element), or null when one cannot be. */
function tiersOf(el: PricingElement): ScaledTiers | null {
  let t = scaledTiers.get(el)
  if (t === undefined) {
    t = null
    const unitPrice = scaledOf(d(el.unitPrice))
    const tiers: ScaledTiers['tiers'] = []
    for (const x of el.tiers) {
      const upTo = x.upTo === null ? null : scaledOf(d(x.upTo))
      const price = scaledOf(d(x.unitPrice))
      if (price === null || (x.upTo !== null && upTo === null)) break
      tiers.push({ upTo, price })
    }
    if (unitPrice !== null && tiers.length === el.tiers.length) t = { unitPrice, tiers }
    scaledTiers.set(el, t)
  }
  return t
}

/** periodCharge in BigInt, as a count of 10^-SCALE; null when the element has no Scaled form. */
function chargeUnits(el: PricingElement, q: Scaled): bigint | null {
  const t = tiersOf(el)
  if (t === null) return null
  if (q.n <= 0n) return 0n
  if (t.tiers.length === 0) return roundScaled(mulScaled(t.unitPrice, q))
  if (el.tiersMode === 'volume') {
    let tier = t.tiers[t.tiers.length - 1]
    for (const x of t.tiers) {
      if (x.upTo === null || cmpScaled(q, x.upTo) <= 0) {
        tier = x
        break
      }
    }
    return roundScaled(mulScaled(tier.price, q))
  }
  let total = SCALED_ZERO
  let below = SCALED_ZERO
  for (let i = 0; i < t.tiers.length; i++) {
    const x = t.tiers[i]
    const last = i === t.tiers.length - 1
    const top = x.upTo === null || last || cmpScaled(q, x.upTo) <= 0 ? q : x.upTo
    if (cmpScaled(top, below) > 0) total = plusScaled(total, mulScaled(minusScaled(top, below), x.price))
    if (x.upTo !== null) below = x.upTo
    if (cmpScaled(below, q) >= 0) break
  }
  return roundScaled(total)
}
