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

/**
 * The largest unit price meterd takes (a tool's per-unit price, a model's per-million-token rate,
 * a media price), in USD. Past 2^53 (about 9×10^15) a price no longer reads back exactly as the
 * JSON number the tool API shows, past 10^21 it shows with an exponent, and a cost of 10^26 or
 * more does not fit ClickHouse's Decimal128(12). At 10^9, a quantity under 10^12 units costs
 * less than 10^21, and a completion of Number.MAX_SAFE_INTEGER tokens less than 10^19.
 */
export const MAX_PRICE_TEXT = '1000000000'
export const MAX_PRICE = new Decimal(MAX_PRICE_TEXT)

/** Why a price is refused (past MAX_PRICE), else undefined. */
export function priceTooLarge(d: Decimal): string | undefined {
  return d.gt(MAX_PRICE) ? `must be at most ${MAX_PRICE_TEXT} (USD)` : undefined
}

const DECIMAL_STRING = /^(\d+)(\.\d+)?$/

/** A non-negative price or amount as a client may send it (number or decimal string), else undefined. */
export function parseAmount(v: unknown): Decimal | undefined {
  if (typeof v === 'number') return Number.isFinite(v) && v >= 0 ? dec(v) : undefined
  if (typeof v === 'string' && DECIMAL_STRING.test(v.trim())) return new Decimal(v.trim())
  return undefined
}

const QUANTITY = /^\d+(\.\d+)?([eE][+-]?\d+)?$/

/** A quantity from usageMetadata: a finite non-negative number or numeric string. */
export function parseQuantity(v: unknown): Decimal | undefined {
  if (typeof v === 'number') return Number.isFinite(v) && v >= 0 ? dec(v) : undefined
  if (typeof v === 'string' && QUANTITY.test(v.trim())) return new Decimal(v.trim())
  return undefined
}

/**
 * parseQuantity as a Scaled: undefined when `v` is not a quantity at all, null when it is one
 * that only Decimal holds (an exponent, more than 40 places).
 */
export function parseQuantityScaled(v: unknown): Scaled | null | undefined {
  if (typeof v === 'number') return Number.isFinite(v) && v >= 0 ? parseScaled(String(v)) : undefined
  if (typeof v === 'string') {
    const text = v.trim()
    return QUANTITY.test(text) ? parseScaled(text) : undefined
  }
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

/**
 * Amounts as exact scaled integers (value = n / 10^s), for the hot paths: completion prices,
 * tool aggregates and tier charges. BigInt products, sums and a half-even rounding give what the
 * Decimal path gives (test/pricing/fixed.test.ts checks both on random inputs) at a fraction of
 * its cost; inputs with more than 40 decimal places stay on Decimal. (Past decimal.js's 60
 * significant digits the two would part, the BigInt side being the exact one.)
 */
export interface Scaled {
  n: bigint
  s: number
}

const MAX_SCALE = 40
const POW10: bigint[] = Array.from({ length: MAX_SCALE * 2 + 1 }, (_, i) => 10n ** BigInt(i))
const scaledPerToken = new WeakMap<Decimal, Scaled | null>()

/** `pricePerMillion / 10^6` as a Scaled (computed once per rate), or null if it cannot be one. */
export function perTokenScaled(pricePerMillion: Decimal): Scaled | null {
  let r = scaledPerToken.get(pricePerMillion)
  if (r === undefined) scaledPerToken.set(pricePerMillion, (r = scaledOf(pricePerMillion, 6)))
  return r
}

/** A non-negative Decimal (divided by 10^shift) as a Scaled, or null if it is negative or too fine. */
export function scaledOf(d: Decimal, shift = 0): Scaled | null {
  if (!d.isFinite() || d.isNegative()) return null
  const text = d.toFixed() // plain notation: toExpPos/toExpNeg keep exponents out
  const dot = text.indexOf('.')
  const s = (dot < 0 ? 0 : text.length - dot - 1) + shift
  if (s > MAX_SCALE) return null
  return { n: BigInt(dot < 0 ? text : text.slice(0, dot) + text.slice(dot + 1)), s }
}

/** `count × rate`, exact. */
export function timesScaled(count: number, rate: Scaled): Scaled {
  return { n: BigInt(count) * rate.n, s: rate.s }
}

/** a + b, exact. */
export function plusScaled(a: Scaled, b: Scaled): Scaled {
  return a.s === b.s ? { n: a.n + b.n, s: a.s } : a.s > b.s ? { n: a.n + b.n * POW10[a.s - b.s], s: a.s } : { n: a.n * POW10[b.s - a.s] + b.n, s: b.s }
}

/** a × b, exact. */
export function mulScaled(a: Scaled, b: Scaled): Scaled {
  return { n: a.n * b.n, s: a.s + b.s }
}

/** a − b, exact (negative when b > a). */
export function minusScaled(a: Scaled, b: Scaled): Scaled {
  return plusScaled(a, { n: -b.n, s: b.s })
}

/** −1, 0 or 1 as a is less than, equal to or greater than b. */
export function cmpScaled(a: Scaled, b: Scaled): number {
  const d = minusScaled(a, b).n
  return d < 0n ? -1 : d > 0n ? 1 : 0
}

export const SCALED_ZERO: Scaled = { n: 0n, s: 0 }

const PLAIN = /^(\d+)(?:\.(\d+))?$/

/** A non-negative decimal in plain notation ("12", "0.005") as a Scaled, or null for any other text. */
export function parseScaled(text: string): Scaled | null {
  const m = PLAIN.exec(text)
  if (!m) return null
  const frac = m[2] ?? ''
  return frac.length > MAX_SCALE ? null : { n: BigInt(m[1] + frac), s: frac.length }
}

/** A non-negative Scaled in plain notation without trailing zeros, as decimal.js's toFixed() writes it. */
export function formatScaled(x: Scaled): string {
  if (x.n === 0n) return '0'
  let digits = x.n.toString()
  if (x.s === 0) return digits
  if (digits.length <= x.s) digits = '0'.repeat(x.s + 1 - digits.length) + digits
  const whole = digits.slice(0, digits.length - x.s)
  let end = digits.length
  while (end > whole.length && digits.charCodeAt(end - 1) === 48) end--
  return end === whole.length ? whole : `${whole}.${digits.slice(whole.length, end)}`
}

/** An amount rounded half-even to SCALE places (a negative one as its magnitude), as an integer count of 10^-SCALE. */
export function roundScaled(x: Scaled): bigint {
  if (x.n < 0n) return -roundScaled({ n: -x.n, s: x.s })
  if (x.s <= SCALE) return x.n * POW10[SCALE - x.s]
  const div = POW10[x.s - SCALE]
  const q = x.n / div
  const twice = (x.n % div) * 2n
  return twice > div || (twice === div && (q & 1n) === 1n) ? q + 1n : q
}

const MONEY_TEXT = /^(-?)(\d+)(?:\.(\d{1,12}))?$/

/** A money string (at most SCALE places, as `money` writes them) as a count of 10^-SCALE, or null for any other text. */
export function unitsOfMoney(text: string): bigint | null {
  const m = MONEY_TEXT.exec(text)
  if (!m) return null
  const frac = m[3] ?? ''
  const units = BigInt(m[2] + frac) * POW10[SCALE - frac.length]
  return m[1] ? -units : units
}

/** The canonical money spelling (as `money` writes it) of a count of 10^-SCALE. */
export function moneyOfUnits(units: bigint): string {
  return units < 0n ? '-' + formatScaled({ n: -units, s: SCALE }) : formatScaled({ n: units, s: SCALE })
}
