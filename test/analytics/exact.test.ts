import fc from 'fast-check'
import t from 'tap'
import { GroupedValues } from '../../src/domain/analytics/grouped-values.js'
import { nearestRank, percentiles } from '../../src/domain/analytics/rank.js'
import { divideUnits, formatUnits, MoneySums, parseUnits, SMALL } from '../../src/domain/analytics/units.js'
import { unitsOfMoney } from '../../src/domain/pricing/money.js'

// Amounts as money() writes them: up to 12 places, whole parts small and large.
const amount = fc
  .tuple(fc.bigInt({ min: 0n, max: 10n ** 8n }), fc.bigInt({ min: 0n, max: 10n ** 12n - 1n }), fc.integer({ min: 0, max: 12 }))
  .map(([whole, frac, places]) => (places === 0 ? `${whole}` : `${whole}.${String(frac).padStart(12, '0').slice(0, places)}`))

t.test('a stored amount reads as exactly its units, small ones as doubles', async (t) => {
  fc.assert(
    fc.property(amount, (text) => {
      const units = parseUnits(text)
      const exact = unitsOfMoney(text)!
      if (BigInt(units!) !== exact) return false
      if (exact < BigInt(SMALL) && typeof units !== 'number') return false
      return formatUnits(units!) === formatUnits(exact)
    }),
    { numRuns: 5000 },
  )
  t.equal(parseUnits('0.1'), 100_000_000_000)
  t.equal(parseUnits('4503.599627370495'), 4503599627370495, 'one unit short of 2^52: still a double')
  t.equal(parseUnits('4503.599627370496'), 4503599627370496n, '2^52 units: a bigint')
  t.equal(parseUnits('12'), 12_000_000_000_000)
  t.equal(parseUnits('1e-12'), null)
  t.equal(parseUnits('0.1234567890123'), null, 'more than 12 places is not a stored amount')
  t.equal(formatUnits(1n), '0.000000000001')
})

t.test('sums are exact whatever the amounts', async (t) => {
  fc.assert(
    fc.property(fc.array(fc.tuple(fc.integer({ min: 0, max: 3 }), amount), { maxLength: 300 }), (adds) => {
      const sums = new MoneySums(4)
      const want = [0n, 0n, 0n, 0n]
      for (const [k, text] of adds) {
        const u = parseUnits(text)!
        if (typeof u === 'number') sums.add(k, u)
        else sums.addBig(k, u)
        want[k] += unitsOfMoney(text)!
      }
      return want.every((w, k) => sums.get(k) === w)
    }),
    { numRuns: 2000 },
  )
  // 10,000 × (2^52 − 1) units: every add would round in a double.
  const sums = new MoneySums(1)
  for (let i = 0; i < 10_000; i++) sums.add(0, SMALL - 1)
  t.equal(sums.get(0), 10_000n * BigInt(SMALL - 1))
  t.equal(divideUnits(5n, 2), 2n, 'means round half to even')
  t.equal(divideUnits(7n, 2), 4n)
  t.equal(divideUnits(10n, 4), 2n)
})

t.test('percentiles are the nearest rank: the smallest value with at least p % no greater', async (t) => {
  const values = fc.array(fc.integer({ min: 0, max: 50 }), { minLength: 1, maxLength: 200 }) // many ties
  fc.assert(
    fc.property(values, fc.integer({ min: 1, max: 100 }), (xs, p) => {
      const sorted = [...xs].sort((a, b) => a - b)
      const n = sorted.length
      let want = sorted[n - 1]
      for (let r = 1; r <= n; r++) if (r * 100 >= p * n) (want = sorted[r - 1]), (r = n)
      const [got] = percentiles(Float64Array.from(xs), [p])
      const atLeast = sorted.filter((v) => v <= got!).length * 100 >= p * n
      const smallest = sorted.filter((v) => v < got!).length * 100 < p * n
      return got === want && atLeast && smallest
    }),
    { numRuns: 3000 },
  )
  t.same([nearestRank(50, 4), nearestRank(95, 20), nearestRank(99, 20), nearestRank(90, 1)], [2, 19, 20, 1])
  t.same(percentiles([], [50]), [null])
})

t.test('per-group percentiles equal each group sorted on its own', async (t) => {
  fc.assert(
    fc.property(fc.array(fc.tuple(fc.integer({ min: 0, max: 4 }), fc.integer({ min: 0, max: 1000 })), { maxLength: 3000 }), (pairs) => {
      const g = new GroupedValues(5)
      for (const [k, v] of pairs) g.push(k, v)
      const got = g.percentiles([50, 95])
      for (let k = 0; k < 5; k++) {
        const mine = pairs.filter(([x]) => x === k).map(([, v]) => v).sort((a, b) => a - b)
        const want = mine.length === 0 ? [null, null] : [mine[nearestRank(50, mine.length) - 1], mine[nearestRank(95, mine.length) - 1]]
        if (got[k][0] !== want[0] || got[k][1] !== want[1]) return false
      }
      return true
    }),
    { numRuns: 500 },
  )
})
