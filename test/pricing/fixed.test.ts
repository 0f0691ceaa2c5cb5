import fc from 'fast-check'
import t from 'tap'
import { Decimal, money, moneyOfUnits, perMillion, perTokenScaled, plusScaled, round, roundScaled, timesScaled } from '../../src/pricing/money.js'
import { PriceBook, priceCompletion } from '../../src/pricing/price-book.js'

// Completion pricing runs in BigInt (src/pricing/money.ts, Scaled) whenever it can; these
// properties hold it to the Decimal arithmetic it replaces, digit for digit, including the
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
  t.notOk(run.failed, `first difference: ${run.counterexample?.map(String).join(' tokens at ')}`)
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
  t.notOk(run.failed, `first difference: ${JSON.stringify(run.counterexample?.[0]?.map((p) => p.map(String)))}`)
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
