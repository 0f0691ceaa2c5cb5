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
