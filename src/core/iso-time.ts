import { withUtcDefault } from '../model/date-time.js'

/**
 * `new Date(ms).toISOString()` without the Date: V8's toISOString is a C++ builtin that costs
 * about 7,000 instructions (a Date object, then a formatted print), and ingest stamps every
 * request's `created` with one. This spells the same text from integer arithmetic and string
 * tables, the date part cached per UTC day: for every millisecond from 1970 to the end of 9999,
 * the same text (test/ingest/iso-time.test.ts); any other time goes to toISOString.
 */

const DAY_MS = 86_400_000
/** toISOString's four-digit years end here (10000-01-01T00:00:00.000Z). */
const LIMIT_MS = 253_402_300_800_000
const TWO = Array.from({ length: 100 }, (_, i) => String(i).padStart(2, '0'))
const THREE = Array.from({ length: 1000 }, (_, i) => String(i).padStart(3, '0'))

let cachedDay = NaN
let cachedPrefix = ''

/** `YYYY-MM-DDT` of a day counted from 1970-01-01 (Howard Hinnant's civil_from_days). */
function datePrefix(days: number): string {
  const z = days + 719_468
  const era = Math.floor(z / 146_097)
  const doe = z - era * 146_097
  const yoe = Math.floor((doe - Math.floor(doe / 1460) + Math.floor(doe / 36_524) - Math.floor(doe / 146_096)) / 365)
  const doy = doe - (365 * yoe + Math.floor(yoe / 4) - Math.floor(yoe / 100))
  const mp = Math.floor((5 * doy + 2) / 153)
  const day = doy - Math.floor((153 * mp + 2) / 5) + 1
  const month = mp < 10 ? mp + 3 : mp - 9
  const year = yoe + era * 400 + (month <= 2 ? 1 : 0)
  return `${TWO[Math.floor(year / 100)]}${TWO[year % 100]}-${TWO[month]}-${TWO[day]}T`
}

/** `new Date(ms).toISOString()`, for an integer number of milliseconds. */
export function isoAt(ms: number): string {
  if (!(ms >= 0 && ms < LIMIT_MS) || !Number.isInteger(ms)) return new Date(ms).toISOString()
  const days = Math.floor(ms / DAY_MS)
  if (days !== cachedDay) {
    cachedDay = days
    cachedPrefix = datePrefix(days)
  }
  let rest = ms - days * DAY_MS
  const h = Math.floor(rest / 3_600_000)
  rest -= h * 3_600_000
  const m = Math.floor(rest / 60_000)
  rest -= m * 60_000
  const s = Math.floor(rest / 1000)
  return `${cachedPrefix}${TWO[h]}:${TWO[m]}:${TWO[s]}.${THREE[rest - s * 1000]}Z`
}

const DIGITS_AT = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22]
const MONTH_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
/** Two digits at i (checked to be digits). */
const d2 = (v: string, i: number): number => (v.charCodeAt(i) - 48) * 10 + (v.charCodeAt(i + 1) - 48)

/**
 * `Date.parse(v)` (a date-time without an offset read as UTC), for every string: the canonical spelling isoAt and toISOString write
 * (`YYYY-MM-DDTHH:MM:SS.sssZ`, a real day, hours below 24) is read from its digits — a small
 * part of Date.parse's cost, and the same number (test/ingest/iso-time.test.ts); any other
 * text goes to Date.parse.
 */
export function msOfIso(v: string): number {
  if (v.length !== 24 || v.charCodeAt(4) !== 45 || v.charCodeAt(7) !== 45 || v.charCodeAt(10) !== 84 || v.charCodeAt(13) !== 58 || v.charCodeAt(16) !== 58 || v.charCodeAt(19) !== 46 || v.charCodeAt(23) !== 90)
    return Date.parse(withUtcDefault(v))
  for (let k = 0; k < DIGITS_AT.length; k++) {
    const c = v.charCodeAt(DIGITS_AT[k])
    if (c < 48 || c > 57) return Date.parse(withUtcDefault(v))
  }
  const year = d2(v, 0) * 100 + d2(v, 2)
  const month = d2(v, 5)
  const day = d2(v, 8)
  const h = d2(v, 11)
  const m = d2(v, 14)
  const s = d2(v, 17)
  if (month < 1 || month > 12 || day < 1 || h > 23 || m > 59 || s > 59) return Date.parse(withUtcDefault(v))
  const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0
  if (day > (month === 2 && leap ? 29 : MONTH_DAYS[month - 1])) return Date.parse(withUtcDefault(v))
  // Days from 1970-01-01 (Howard Hinnant's days_from_civil).
  const y = month <= 2 ? year - 1 : year
  const era = Math.floor(y / 400)
  const yoe = y - era * 400
  const doy = Math.floor((153 * (month > 2 ? month - 3 : month + 9) + 2) / 5) + day - 1
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy
  const days = era * 146_097 + doe - 719_468
  return days * DAY_MS + h * 3_600_000 + m * 60_000 + s * 1000 + (v.charCodeAt(20) - 48) * 100 + d2(v, 21)
}
