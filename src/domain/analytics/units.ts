import { moneyOfUnits, unitsOfMoney } from '../pricing/money.js'

/**
 * Analytics counts money in integer units of 10^-12 USD (money.ts's SCALE: every stored amount
 * has at most 12 places, so a record's cost is a whole number of units).
 *
 * A cost below 2^52 units (about $4,503) is held as a double, which is exact for integers below
 * 2^53; sums of such costs are kept exact by `MoneySums`, which moves a sum into a BigInt before
 * it can reach 2^53. So the hot loops add doubles and never round, and the rare larger amount
 * takes a BigInt path.
 */
export const SMALL = 2 ** 52

const POW10 = [1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12]
// int × 10^12 + fraction stays below 2^52 while the whole part is below this.
const MAX_SMALL_WHOLE = 4503

/**
 * A stored amount (`cost.total`: plain decimal, at most 12 places) as units: a number when it
 * is non-negative and below 2^52, a bigint otherwise, null when it is not an amount.
 */
export function parseUnits(text: string): number | bigint | null {
  const n = text.length
  let i = 0
  let whole = 0
  let c = 0
  while (i < n && (c = text.charCodeAt(i)) >= 48 && c <= 57 && i < 5) {
    whole = whole * 10 + (c - 48)
    i++
  }
  if (i > 0 && whole < MAX_SMALL_WHOLE) {
    let frac = 0
    let places = 0
    if (i < n && text.charCodeAt(i) === 46) {
      i++
      while (i < n && (c = text.charCodeAt(i)) >= 48 && c <= 57 && places < 13) {
        frac = frac * 10 + (c - 48)
        places++
        i++
      }
    }
    if (i === n && places <= 12 && (places > 0 || text.charCodeAt(n - 1) !== 46)) return whole * 1e12 + frac * POW10[12 - places]
  }
  const big = unitsOfMoney(text)
  if (big === null) return null
  return big >= 0n && big < BigInt(SMALL) ? Number(big) : big
}

/** Units as the canonical money string (`money()`'s spelling: no exponent, no trailing zeros). */
export function formatUnits(units: number | bigint): string {
  return moneyOfUnits(typeof units === 'bigint' ? units : BigInt(units))
}

/** a / b rounded half-even to a whole unit (b > 0): the mean of b amounts, to the last stored place. */
export function divideUnits(a: bigint, b: number): bigint {
  const d = BigInt(b)
  const neg = a < 0n
  const m = neg ? -a : a
  const q = m / d
  const twice = (m % d) * 2n
  const r = twice > d || (twice === d && (q & 1n) === 1n) ? q + 1n : q
  return neg ? -r : r
}

/**
 * Exact money sums, one per slot (an agent, a trace, a tool's bucket): the running sum of each
 * slot is a double below 2^52, and whatever would pass it is carried into a BigInt.
 */
export class MoneySums {
  readonly lo: Float64Array
  private hi?: bigint[]

  constructor(readonly size: number) {
    this.lo = new Float64Array(size)
  }

  /** Adds a small amount (0 ≤ units < 2^52). */
  add(k: number, units: number): void {
    const v = this.lo[k] + units
    if (v < SMALL) this.lo[k] = v
    else this.carry(k, v)
  }

  /** Adds any amount. */
  addBig(k: number, units: bigint): void {
    const hi = (this.hi ??= new Array<bigint>(this.size).fill(0n))
    hi[k] += units
  }

  private carry(k: number, v: number): void {
    this.addBig(k, BigInt(v)) // v < 2^53: still an exact integer
    this.lo[k] = 0
  }

  get(k: number): bigint {
    const lo = BigInt(this.lo[k])
    return this.hi === undefined ? lo : lo + this.hi[k]
  }

  /** True when every slot is exactly its double (no carry, no large amount): `lo` can be sorted as is. */
  get small(): boolean {
    return this.hi === undefined || this.hi.every((h) => h === 0n)
  }
}
