import fc from 'fast-check'
import t from 'tap'
import { msOfIso } from '../../src/core/iso-time.js'
import { isDateTime, toIsoUtc } from '../../src/model/schemas.js'

// The reference: the regex and Date.parse, and a day that exists in its month (Date.parse
// rolls 30 February into March; the day must read back as written).
const DATE_TIME = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?([Zz]|[+-]\d{2}(:?\d{2})?)?$/
function referenceIsDateTime(v: string): boolean {
  if (!DATE_TIME.test(v)) return false
  const [year, month, day, hour, minute] = [v.slice(0, 4), v.slice(5, 7), v.slice(8, 10), v.slice(11, 13), v.slice(14, 16)].map(Number)
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59) return false
  if (Number.isNaN(Date.parse(/[Zz]|[+-]\d{2}(:?\d{2})?$/.test(v.slice(16)) ? v : v + 'Z'))) return false
  const d = new Date(Date.UTC(2000, month - 1, day))
  d.setUTCFullYear(year)
  return d.getUTCDate() === day
}

const two = (n: number) => String(n).padStart(2, '0')
// Canonical-looking stamps, with out-of-range parts on purpose (month 13, day 31 of short months,
// 29 February in leap and common years, second 60).
const stamp = fc
  .record({
    year: fc.integer({ min: 0, max: 9999 }),
    month: fc.integer({ min: 0, max: 13 }),
    day: fc.integer({ min: 0, max: 32 }),
    hour: fc.integer({ min: 0, max: 24 }),
    minute: fc.integer({ min: 0, max: 60 }),
    second: fc.integer({ min: 0, max: 60 }),
    ms: fc.integer({ min: 0, max: 999 }),
  })
  .map((p) => `${String(p.year).padStart(4, '0')}-${two(p.month)}-${two(p.day)}T${two(p.hour)}:${two(p.minute)}:${two(p.second)}.${String(p.ms).padStart(3, '0')}Z`)

t.test('the canonical fast path answers exactly what the regex and Date.parse answer', async (t) => {
  fc.assert(
    fc.property(stamp, (v) => {
      if (isDateTime(v) !== referenceIsDateTime(v)) throw new Error(`isDateTime(${v})`)
      if (isDateTime(v) && toIsoUtc(v) !== new Date(v).toISOString()) throw new Error(`toIsoUtc(${v}) = ${toIsoUtc(v)}`)
    }),
    { numRuns: 20_000 },
  )
  t.pass('20,000 generated stamps agree')
})

t.test('one character changed anywhere in a canonical stamp: the fast path answers as the reference', async (t) => {
  const base = '2026-11-21T23:55:47.661Z'
  // The characters around the digits and separators ('/' and ':' bound the digits), and others.
  for (let i = 0; i < base.length; i++) {
    for (const c of ['/', ':', '0', '9', '-', 'T', 't', 'Z', '.', 'a', ' ', '\u0660']) {
      const v = base.slice(0, i) + c + base.slice(i + 1)
      t.equal(isDateTime(v), referenceIsDateTime(v), `isDateTime(${JSON.stringify(v)})`)
      if (isDateTime(v)) t.equal(toIsoUtc(v), new Date(v).toISOString(), `toIsoUtc(${JSON.stringify(v)})`)
    }
  }
})

t.test('known cases: leap days, days past the month end, other spellings', async (t) => {
  t.equal(toIsoUtc('2024-02-29T10:00:00.000Z'), '2024-02-29T10:00:00.000Z', 'a leap day is kept')
  t.notOk(isDateTime('2026-02-29T10:00:00.000Z'), 'no 29 February in 2026 (Date would roll it into March)')
  t.notOk(isDateTime('2026-02-30T10:00:00Z'), '30 February without milliseconds')
  t.notOk(isDateTime('2026-04-31T10:00:00+02:00'), '31 April with an offset')
  t.notOk(isDateTime('2100-02-29T10:00:00.000Z'), '2100 is not a leap year')
  t.equal(toIsoUtc('2000-02-29T10:00:00.000Z'), '2000-02-29T10:00:00.000Z', '2000 is')
  t.equal(toIsoUtc('2026-11-21T23:55:47+01:00'), '2026-11-21T22:55:47.000Z', 'an offset without milliseconds is normalised')
  t.equal(toIsoUtc('2026-11-21T23:55:47.661123Z'), '2026-11-21T23:55:47.661Z', 'microseconds are cut to milliseconds')
  t.notOk(isDateTime('2026-11-21T23:55:60.000Z'), 'second 60')
  t.notOk(isDateTime('2026-13-21T23:55:47.661Z'), 'month 13')
  t.notOk(isDateTime('2026-11-21T23:55:47.661z '), 'trailing space')
  t.ok(isDateTime('2026-11-21t23:55:47.661z'), 'lower-case t and z are RFC 3339')
})

t.test('a date-time without an offset is UTC, whatever the host\'s time zone (Date alone reads it as local time)', async (t) => {
  const tz = process.env.TZ
  process.env.TZ = 'America/New_York'
  t.teardown(() => {
    if (tz === undefined) delete process.env.TZ
    else process.env.TZ = tz
  })
  t.ok(isDateTime('2026-11-21T23:55:47.661000'), "Python's datetime.isoformat() of a UTC time")
  t.equal(toIsoUtc('2026-11-21T23:55:47.661000'), '2026-11-21T23:55:47.661Z')
  t.equal(toIsoUtc('2026-11-21T23:55:47'), '2026-11-21T23:55:47.000Z')
  t.equal(toIsoUtc('2026-11-21 23:55'), '2026-11-21T23:55:00.000Z')
  t.equal(toIsoUtc('2026-11-21T23:55:47-05:00'), '2026-11-22T04:55:47.000Z', 'an offset still counts')
  t.equal(msOfIso('2026-11-21T23:55:47'), Date.UTC(2026, 10, 21, 23, 55, 47), 'msOfIso agrees')
  t.notOk(isDateTime('2026-11-21T23:55:47.661-'), 'a dangling sign is no offset')
  t.notOk(isDateTime('2026-02-30T10:00:00'), '30 February without an offset either')
})
