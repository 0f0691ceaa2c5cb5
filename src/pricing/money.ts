import { Decimal as DecimalJs } from 'decimal.js'

/**
 * Money is exact (DESIGN §2): decimal arithmetic with 60 significant digits, so sums,
 * differences and products of prices and quantities never round; a stored amount is
 * rounded once, half-even, to SCALE decimal places (docs/pricing.md).
 */
export const Decimal = DecimalJs.clone({ precision: 60, rounding: DecimalJs.ROUND_HALF_EVEN, toExpNeg: -100, toExpPos: 100 })
export type Decimal = InstanceType<typeof Decimal>

/** Decimal places of every stored amount and of an AVERAGE quantity. */
export const SCALE = 12

export const ZERO = new Decimal(0)
const MILLION = new Decimal(1_000_000)

/** A JSON number or decimal string → Decimal; numbers go through their shortest decimal spelling. */
export function dec(v: number | string | Decimal): Decimal {
  return v instanceof Decimal ? v : new Decimal(typeof v === 'number' ? String(v) : v)
}

const DECIMAL_STRING = /^(\d+)(\.\d+)?$/

/** A non-negative price or amount as a client may send it (number or decimal string), else undefined. */
export function parseAmount(v: unknown): Decimal | undefined {
  if (typeof v === 'number') return Number.isFinite(v) && v >= 0 ? dec(v) : undefined
  if (typeof v === 'string' && DECIMAL_STRING.test(v.trim())) return new Decimal(v.trim())
  return undefined
}

/** A quantity from usageMetadata: a finite non-negative number or numeric string. */
export function parseQuantity(v: unknown): Decimal | undefined {
  if (typeof v === 'number') return Number.isFinite(v) && v >= 0 ? dec(v) : undefined
  if (typeof v === 'string' && /^\d+(\.\d+)?([eE][+-]?\d+)?$/.test(v.trim())) return new Decimal(v.trim())
  return undefined
}

/** Rounded to SCALE places, half-even. */
export function round(d: Decimal): Decimal {
  return d.toDecimalPlaces(SCALE, Decimal.ROUND_HALF_EVEN)
}

/** The canonical stored spelling: plain notation, no exponent, no trailing zeros. */
export function money(d: Decimal): string {
  if (d.isZero()) return '0'
  const s = round(d).toFixed()
  return s === '-0' ? '0' : s
}

// Price per token of each (immutable, long-lived) per-million rate, divided once: the hot path multiplies only.
const perToken = new WeakMap<Decimal, Decimal>()

/** tokens × (price per million tokens), exact. */
export function perMillion(tokens: number, pricePerMillion: Decimal): Decimal {
  if (tokens === 0) return ZERO
  let rate = perToken.get(pricePerMillion)
  if (rate === undefined) perToken.set(pricePerMillion, (rate = pricePerMillion.div(MILLION)))
  return rate.times(tokens)
}
