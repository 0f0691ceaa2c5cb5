import fc from 'fast-check'
import t from 'tap'
import { Decimal, money, moneyOfUnits, unitsOfMoney, perMillion, perTokenScaled, plusScaled, round, roundScaled, timesScaled } from '../../src/domain/pricing/money.js'
import { moveDecimal, moveScaled, type Aggregate } from '../../src/domain/pricing/aggregates.js'
import { PriceBook, priceCompletion } from '../../src/domain/pricing/price-book.js'
import { elementStep, periodCharge } from '../../src/domain/pricing/tiers.js'
import { AGGREGATION_TYPES, type PricingElement } from '../../src/model/pricing-element.js'

// Completion prices and tool tier charges run in BigInt (src/domain/pricing/money.ts, Scaled) whenever
// they can; these properties hold them to the Decimal arithmetic they replace, digit for digit, including the
// half-even rounding at the 12th place and sums rounded once.

/** A price per million tokens as an operator writes it: up to 10 decimal places, up to 10,000 USD. */
const rate = fc
  .tuple(fc.bigInt({ min: 0n, max: 10n ** 14n }), fc.integer({ min: 0, max: 10 }))
  .map(([n, places]) => new Decimal(n.toString()).div(new Decimal(10).pow(places)))
const tokens = fc.oneof(fc.integer({ min: 0, max: 2_000_000 }), fc.constantFrom(0, 1, 999_999, 1_000_001, Number.MAX_SAFE_INTEGER))

t.test('count × rate per million, rounded half-even to 12 places: BigInt == Decimal', async (t) => {
  const run = fc.check(
    fc.property(tokens, rate, (n, r) => moneyOfUnits(roundScaled(timesScaled(n, perTokenScaled(r)!))) === money(round(perMillion(n, r)))),
    { numRuns: 5000 },
  )
  t.notOk(run.failed, 'no count and rate where they differ', { counterexample: run.counterexample?.map(String) })
})

t.test('two terms summed before rounding, then parts summed: BigInt == Decimal', async (t) => {
  const run = fc.check(
    fc.property(fc.array(fc.tuple(tokens, rate, tokens, rate), { minLength: 1, maxLength: 5 }), (parts) => {
      let units = 0n
      let total = new Decimal(0)
      for (const [n1, r1, n2, r2] of parts) {
        units += roundScaled(plusScaled(timesScaled(n1, perTokenScaled(r1)!), timesScaled(n2, perTokenScaled(r2)!)))
        total = total.plus(round(perMillion(n1, r1).plus(perMillion(n2, r2))))
      }
      return moneyOfUnits(units) === money(total)
    }),
    { numRuns: 2000 },
  )
  t.notOk(run.failed, 'no list of parts where they differ', { counterexample: run.counterexample?.[0]?.map((p) => p.map(String)) })
})

t.test('exact halves round to even at the 12th place', async (t) => {
  // 1 token at 0.0000005 per million = 5e-13: a half below the last place, rounds to 0 (even);
  // 3 tokens = 1.5e-12 rounds to 2e-12; 1 token at 0.0000015 = 1.5e-12 → 2e-12; 25 tokens = 1.25e-11 → 1.2e-11.
  const cases: [number, string, string][] = [
    [1, '0.0000005', '0'],
    [3, '0.0000005', '0.000000000002'],
    [1, '0.0000015', '0.000000000002'],
    [25, '0.0000005', '0.000000000012'],
  ]
  for (const [n, r, want] of cases) t.equal(moneyOfUnits(roundScaled(timesScaled(n, perTokenScaled(new Decimal(r))!))), want, `${n} × ${r}`)
})

t.test('a rate too fine for the BigInt path, fractional counts and batch pricing take the Decimal path and still price', async (t) => {
  t.equal(perTokenScaled(new Decimal('1e-40')), null, 'more than 40 places after the shift: no Scaled form')
  const book = new PriceBook(
    {
      version: 't',
      providers: {
        openai: {
          cached_in_input: true,
          batch_multiplier: 0.5,
          models: { 'm-1': { effective: '2026-01-01', input: '0.0000000000000000000000000000000000003', output: 2 } },
        },
      },
    } as never,
    [],
  )
  const fine = priceCompletion(book, { provider: 'openai', model: 'm-1', inputTokenCount: 10, outputTokenCount: 1_000_000 } as never)
  t.equal(fine.parts.outputTokenCost, '2')
  t.equal(fine.parts.inputTokenCost, '0', '3e-43 USD rounds to 0 at 12 places')
  t.equal(fine.total, '2')
  const fractional = priceCompletion(book, { provider: 'openai', model: 'm-1', inputTokenCount: 0, outputTokenCount: 0.5 } as never)
  t.equal(fractional.parts.outputTokenCost, '0.000001', 'half a token at 2 USD per million')
  const batch = priceCompletion(book, { provider: 'openai', model: 'm-1', inputTokenCount: 0, outputTokenCount: 1_000_000, pricingTier: 'BATCH' } as never)
  t.equal(batch.total, '1', 'the batch multiplier halves it')
})

/** A non-negative decimal string with up to `places` decimal places. */
const decimal = (maxUnits: bigint, places: number) =>
  fc.tuple(fc.bigInt({ min: 0n, max: maxUnits }), fc.integer({ min: 0, max: places })).map(([n, p]) => new Decimal(n.toString()).div(new Decimal(10).pow(p)).toFixed())
const tieredElement = fc
  .record({
    aggregationType: fc.constantFrom(...AGGREGATION_TYPES),
    tiersMode: fc.constantFrom('volume' as const, 'graduated' as const),
    unitPrice: decimal(10n ** 9n, 8),
    bounds: fc.uniqueArray(decimal(10n ** 7n, 2), { maxLength: 4 }),
    prices: fc.array(decimal(10n ** 9n, 8), { minLength: 5, maxLength: 5 }),
    lastUnlimited: fc.boolean(),
  })
  .map(({ aggregationType, tiersMode, unitPrice, bounds, prices, lastUnlimited }): PricingElement => {
    const ups = [...new Set(bounds.filter((b) => b !== '0'))].sort((a, b) => new Decimal(a).cmp(b))
    const tiers: PricingElement['tiers'] = ups.map((u, i) => ({ upTo: u, unitPrice: prices[i] }))
    if (tiers.length && lastUnlimited) tiers.push({ upTo: null, unitPrice: prices[4] })
    return { name: 'x', aggregationType, tiersMode, unitPrice, tiers }
  })
/** An aggregate quantity: counts, sums of metadata values (many decimal places), averages (12 places). */
const quantity = fc.oneof(decimal(10n ** 9n, 0), decimal(10n ** 20n, 20), decimal(10n ** 15n, 12)).map((q) => new Decimal(q))

t.test('one element of a tool event, its cost and quantity: BigInt == Decimal, both tier modes, any quantities', async (t) => {
  const run = fc.check(
    fc.property(tieredElement, quantity, quantity, (el, qBefore, qAfter) => {
      const got = elementStep(el, qBefore, qAfter)
      return got.part === money(periodCharge(el, qAfter).minus(periodCharge(el, qBefore))) && got.quantity === money(qAfter.minus(qBefore))
    }),
    { numRuns: 5000 },
  )
  t.notOk(run.failed, 'no element and quantities where they differ', { counterexample: JSON.stringify(run.counterexample, (_k, v) => (v instanceof Decimal ? v.toFixed() : v)) })
})

t.test('an element priced finer than 40 places is charged through Decimal, exactly', async (t) => {
  const fine = '0.' + '0'.repeat(44) + '1' // 1e-45 per unit
  const el: PricingElement = { name: 'x', aggregationType: 'SUM', tiersMode: 'graduated', unitPrice: '0', tiers: [{ upTo: '10', unitPrice: '1' }, { upTo: null, unitPrice: fine }] }
  t.same(elementStep(el, new Decimal(0), new Decimal(12)), { part: '10', quantity: '12' }, 'the second tier adds 2e-45, which rounds away at 12 places')
  t.same(elementStep(el, new Decimal(10), new Decimal(4)), { part: '-6', quantity: '-6' }, 'an AVERAGE that falls moves both down')
})

t.test('a tool cost total, the sum of its parts: BigInt == Decimal, negative parts included', async (t) => {
  const part = fc.tuple(fc.boolean(), decimal(10n ** 18n, 12)).map(([neg, v]) => money(new Decimal(v).times(neg ? -1 : 1)))
  const run = fc.check(
    fc.property(fc.array(part, { minLength: 1, maxLength: 6 }), (parts) => {
      let units = 0n
      for (const p of parts) units += unitsOfMoney(p)!
      return moneyOfUnits(units) === money(parts.reduce((sum, p) => sum.plus(p), new Decimal(0)))
    }),
    { numRuns: 3000 },
  )
  t.notOk(run.failed, 'no parts whose sum differs', { counterexample: run.counterexample?.[0] })
  t.equal(unitsOfMoney('1e-7'), null, 'only money spellings; anything else takes the Decimal path')
  t.equal(unitsOfMoney('0.0000000000001'), null, 'and never more than 12 places')
})

t.test('an aggregate moved by a metadata value: BigInt == Decimal, for SUM and MAXIMUM, whatever the client sends', async (t) => {
  const raw = fc.oneof(
    fc.integer({ min: -5, max: 1_000_000 }),
    fc.double({ min: 0, max: 1e6, noNaN: true }),
    fc.constantFrom(1e-7, 5e-324, 1e21, 0.1, -0, Number.NaN, Infinity, -3),
    fc.constantFrom('3.10', ' 7 ', '007', '1e3', '2.5E-2', 'abc', '', '-1', '0.' + '0'.repeat(45) + '1'),
    decimal(10n ** 18n, 18),
    fc.constantFrom(true, null, undefined, { n: 1 }),
  )
  const el = tieredElement.map((e) => ({ ...e, aggregationType: e.aggregationType === 'MAXIMUM' ? ('MAXIMUM' as const) : ('SUM' as const) }))
  let scaled = 0
  const run = fc.check(
    fc.property(el, fc.array(raw, { minLength: 1, maxLength: 12 }), (el, values) => {
      // Each path is fed its own previous aggregate, so a difference anywhere in the stream shows.
      let a: Aggregate = { n: 0, nv: 0, sum: '0', max: '0', distinct: 0 }
      let b = a
      for (const v of values) {
        const fast = moveScaled(el, a, v)
        const slow = moveDecimal(el, b, v)
        if (fast) scaled++
        const got = fast ?? moveDecimal(el, a, v)
        if (JSON.stringify(got) !== JSON.stringify(slow)) return false
        a = got.after
        b = slow.after
      }
      return true
    }),
    { numRuns: 2000 },
  )
  t.notOk(run.failed, 'no stream where they differ', { counterexample: JSON.stringify(run.counterexample) })
  t.ok(scaled > 5000, `the BigInt path took most moves (${scaled})`)
})
