/**
 * The `created` time of every 201 is spelled by isoAt (src/core/iso-time.ts) instead of
 * Date#toISOString: it must spell every millisecond exactly as toISOString does, or clients
 * would read a wrong receive time.
 */
import t from 'tap'
import { isoAt, msOfIso } from '../../src/core/iso-time.js'

const DAY = 86_400_000
const same = (ms: number): boolean => isoAt(ms) === new Date(ms).toISOString()

t.test('every day boundary, month end and leap day from 1970 to 2400 is spelled as toISOString spells it', async (t) => {
  let bad = 0
  for (let ms = 0; ms < Date.UTC(2400, 0, 2); ms += DAY) {
    for (const at of [ms, ms - 1, ms + 1, ms + DAY / 2 + 12_345]) if (at >= 0 && !same(at)) bad++
  }
  t.equal(bad, 0)
  t.equal(isoAt(Date.UTC(2024, 1, 29, 23, 59, 59, 999)), '2024-02-29T23:59:59.999Z')
  t.equal(isoAt(Date.UTC(2100, 1, 28, 0, 0, 0, 7)), '2100-02-28T00:00:00.007Z', 'no leap day in 2100')
  t.equal(isoAt(Date.UTC(2000, 1, 29, 12, 0, 0, 0)), '2000-02-29T12:00:00.000Z', 'a leap day in 2000')
})

t.test('random milliseconds over years 0000–9999, and the edges, match toISOString', async (t) => {
  let seed = 42
  const next = () => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31)
  const min = new Date('0000-01-01T00:00:00.000Z').getTime()
  const max = new Date('9999-12-31T23:59:59.999Z').getTime()
  let bad = 0
  for (let i = 0; i < 200_000; i++) if (!same(Math.floor(min + next() * (max - min)))) bad++
  t.equal(bad, 0)
  for (const ms of [0, max, max + 1, -1, min, 1.5, Date.now()]) t.equal(isoAt(ms), new Date(ms).toISOString(), `at ${ms}`)
})

t.test('msOfIso reads every text as Date.parse does: canonical times from their digits, the rest through Date.parse', async (t) => {
  let seed = 7
  const next = () => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31)
  const min = Date.parse('0000-01-01T00:00:00.000Z')
  const max = Date.parse('9999-12-31T23:59:59.999Z')
  const texts: string[] = []
  for (let i = 0; i < 100_000; i++) texts.push(new Date(Math.floor(min + next() * (max - min))).toISOString())
  for (let ms = Date.UTC(1899, 11, 1); ms < Date.UTC(2401, 2, 2); ms += DAY) texts.push(new Date(ms).toISOString(), new Date(ms - 1).toISOString())
  // Not real moments, or not the canonical spelling: Date.parse decides (NaN, another reading, or an offset).
  texts.push(
    '2026-02-29T00:00:00.000Z', '2024-02-29T12:00:00.000Z', '2100-02-29T00:00:00.000Z', '2000-02-29T00:00:00.000Z', '2026-04-31T00:00:00.000Z', '2026-13-01T00:00:00.000Z',
    '2026-00-10T00:00:00.000Z', '2026-01-00T00:00:00.000Z', '2026-01-32T00:00:00.000Z', '2026-01-01T24:00:00.000Z', '2026-01-01T23:60:00.000Z', '2026-01-01T23:59:60.000Z',
    '2026-01-01T00:00:00.000z', '2026-01-01t00:00:00.000Z', '2026-01-01 00:00:00.000Z', '2026-01-01T00:00:00.000+01:00', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00.0000Z',
    '2026-01-01T00:00:00.00AZ', '2026-0a-01T00:00:00.000Z', '+02026-01-01T00:00:00.000', '0000-01-01T00:00:00.000Z', '9999-12-31T23:59:59.999Z', '1970-01-01T00:00:00.000Z',
    '1969-12-31T23:59:59.999Z', '2026-11-25', 'not a date', '', '2026-01-01T00:00:00.000Z ', '２０２６-01-01T00:00:00.000Z', '2026-01-01T00:00:00.-01Z', '2026-01-01T00:00:0/.000Z',
  )
  let bad = 0
  for (const v of texts) if (!Object.is(msOfIso(v), Date.parse(v))) bad++ && t.fail(`${JSON.stringify(v)}: ${msOfIso(v)}, Date.parse ${Date.parse(v)}`)
  t.equal(bad, 0, `${texts.length} texts`)
})
