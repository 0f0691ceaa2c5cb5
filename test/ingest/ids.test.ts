/**
 * Record ids (src/core/ids.ts): 26 Crockford base32 characters, strictly increasing within a
 * process, random in their last 16 characters at each new millisecond. A client reads an id as
 * the record's identity, and the store keys records by it: two equal ids would be one record.
 */
import t from 'tap'
import { idTimeMs, idTimePrefix, newId } from '../../src/core/ids.js'

const FORMAT = /^[0-9ABCDEFGHJKMNPQRSTVWXYZ]{26}$/

t.test('ids are well-formed, unique and strictly increasing, within a millisecond and across many', async (t) => {
  const base = Date.UTC(2026, 10, 25)
  let prev = ''
  let bad = 0
  let unordered = 0
  const seen = new Set<string>()
  // 2,000 milliseconds with 1–7 ids each: far more random draws than the 4 KiB pool holds.
  for (let ms = 0; ms < 2000; ms++)
    for (let k = 0; k <= ms % 7; k++) {
      const id = newId(base + ms)
      if (!FORMAT.test(id)) bad++
      if (id <= prev) unordered++
      seen.add(id)
      prev = id
    }
  t.equal(bad, 0, 'every id is 26 Crockford base32 characters')
  t.equal(unordered, 0, 'each id sorts after the one before')
  t.equal(seen.size, [...Array(2000).keys()].reduce((n, ms) => n + (ms % 7) + 1, 0), 'no id repeats')
})

t.test('each new millisecond draws a fresh random tail', async (t) => {
  const base = Date.UTC(2027, 0, 1)
  const tails = new Set<string>()
  for (let ms = 0; ms < 1000; ms++) tails.add(newId(base + ms).slice(10))
  t.equal(tails.size, 1000, 'no two milliseconds share their random part')
})

t.test('idTimePrefix(ms) sorts before every id made at ms or later and after every id made before', async (t) => {
  const base = Date.UTC(2028, 5, 1)
  let wrong = 0
  for (let ms = 0; ms < 300; ms++) {
    const id = newId(base + ms)
    // the ids of ms, of the next millisecond and of the one before, against ms's prefix
    if (!(idTimePrefix(base + ms) < id) || !(idTimePrefix(base + ms + 1) > id) || !(idTimePrefix(base + ms - 1) < id)) wrong++
    if (!id.startsWith(idTimePrefix(base + ms))) wrong++
  }
  t.equal(wrong, 0)
})

t.test('idTimeMs reads back the milliseconds an id was made at', async (t) => {
  for (const ms of [0, 1, 31, 32, Date.UTC(2026, 10, 27, 17, 0, 0, 123), 2 ** 48 - 1]) t.equal(idTimeMs(idTimePrefix(ms)), ms)
  const later = Date.UTC(2090, 0, 1, 0, 0, 0, 7) // after every id this test made
  t.equal(idTimeMs(newId(later)), later)
})
