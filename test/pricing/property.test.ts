import fc from 'fast-check'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { Decimal } from '../../src/domain/pricing/money.js'
import { ToolAggregates, quantityOf } from '../../src/domain/pricing/aggregates.js'
import { periodCharge } from '../../src/domain/pricing/tiers.js'
import { AGGREGATION_TYPES, type PricingElement } from '../../src/model/pricing-element.js'
import { Store } from '../../src/store/store.js'

// For random tiers, aggregations and event streams, the per-event costs C(after) − C(before)
// add up to C(final aggregate) exactly, in both modes, for every aggregation type — on the real
// LMDB aggregates.

const price = fc.integer({ min: 0, max: 10_000_000 }).map((n) => new Decimal(n).div(1_000_000).toFixed()) // 0 .. 10, 6 places
const element = fc
  .record({
    aggregationType: fc.constantFrom(...AGGREGATION_TYPES),
    tiersMode: fc.constantFrom('volume' as const, 'graduated' as const),
    unitPrice: price,
    bounds: fc.uniqueArray(fc.integer({ min: 1, max: 5000 }), { maxLength: 4 }),
    prices: fc.array(price, { minLength: 5, maxLength: 5 }),
    lastUnlimited: fc.boolean(),
  })
  .map(({ aggregationType, tiersMode, unitPrice, bounds, prices, lastUnlimited }): PricingElement => {
    const ups = [...bounds].sort((a, b) => a - b)
    const tiers = ups.map((u, i) => ({ upTo: String(u), unitPrice: prices[i] }))
    if (tiers.length && lastUnlimited) tiers.push({ upTo: null as unknown as string, unitPrice: prices[4] })
    return { name: 'x', aggregationType, tiersMode, unitPrice, tiers: tiers as PricingElement['tiers'] }
  })
const value = fc.oneof(
  fc.integer({ min: 0, max: 3000 }),
  fc.double({ min: 0, max: 500, noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom('a', 'b', 'c', 'd'),
  fc.constant(undefined),
)

t.test('Σ per-event cost == C(final) exactly, every aggregation, both tier modes', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'meterd-prop-'))
  const store = new Store({ path: dir, maxSizeMb: 256 })
  t.teardown(async () => {
    await store.close()
    rmSync(dir, { recursive: true, force: true })
  })
  const agg = new ToolAggregates(store)
  let run = 0
  const seen = new Set<string>()
  await fc.assert(
    fc.asyncProperty(element, fc.array(value, { minLength: 1, maxLength: 40 }), async (el, values) => {
      const scope = ['prop', String(run++)]
      seen.add(el.aggregationType + el.tiersMode)
      let total = new Decimal(0)
      for (let i = 0; i < values.length; i++) {
        const [applied] = await agg.apply([{ recordId: `${scope[1]}-${i}`, scope, elements: [el], usageMetadata: { x: values[i] } }], 0)
        total = total.plus(applied.parts.x)
      }
      const final = periodCharge(el, quantityOf(el, agg.get(scope, 'x')))
      if (!total.eq(final)) throw new Error(`Σ ${total.toFixed()} ≠ C(final) ${final.toFixed()}`)
    }),
    { numRuns: 300, seed: 20261121 },
  )
  t.equal(seen.size, 10, 'every aggregation type was tried in both modes')
})

t.test('C(q) of the worked table, directly', async (t) => {
  const tiers = [
    { upTo: '1000', unitPrice: '0.01' },
    { upTo: '10000', unitPrice: '0.008' },
    { upTo: null, unitPrice: '0.005' },
  ]
  const vol: PricingElement = { name: 'u', aggregationType: 'SUM', tiersMode: 'volume', unitPrice: '0', tiers }
  const grad: PricingElement = { ...vol, tiersMode: 'graduated' }
  const at = (el: PricingElement, q: number) => periodCharge(el, new Decimal(q)).toFixed()
  t.same([1000, 10000, 10001, 15000].map((q) => at(vol, q)), ['10', '80', '50.005', '75'])
  t.same([1000, 10000, 10001, 15000].map((q) => at(grad, q)), ['10', '82', '82.005', '107'])
  t.equal(at({ ...vol, tiers: [] , unitPrice: '0.1' }, 3), '0.3', 'flat: 0.1 × 3 has no float error')
})

t.test('a charge whose transactionId is stored for another record moves nothing and gets that record’s cost', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'meterd-prop-'))
  const store = new Store({ path: dir, maxSizeMb: 64 })
  t.teardown(async () => {
    await store.close()
    rmSync(dir, { recursive: true, force: true })
  })
  const agg = new ToolAggregates(store)
  const el: PricingElement = { name: 'n', aggregationType: 'COUNT', tiersMode: 'volume', unitPrice: '1', tiers: [] }
  const HOUR = 3_600_000
  const charge = { recordId: 'r1', transaction: { team: 'team-a', id: 'tx-1' }, scope: ['s'], elements: [el], usageMetadata: undefined }
  const [first] = await agg.apply([charge], 0, 24 * HOUR)
  t.same(first.parts, { n: '1' })
  // The record r1 is stored under tx-1 (by another process, say), with the cost it was given.
  const record = {
    id: 'r1', kind: 'tool', body: { transactionId: 'tx-1', toolId: 'geo' }, eventTime: '2026-11-01T00:00:00.000Z', receivedAt: '2026-11-01T00:00:00.000Z',
    caller: { account: 'acct', tenant: '', team: 'team-a', environment: '', keyId: 'k' }, attribution: {}, attributed: false,
    cost: { currency: 'USD', total: '1', parts: first.parts, quantities: first.quantities, source: 'registry' },
  } as any
  await store.root.transaction(() => store.usage.writeInTransaction([record], { dedupWindowMs: 24 * HOUR, now: 0 }))

  const [twin] = await agg.apply([{ ...charge, recordId: 'r2' }], HOUR, 24 * HOUR)
  t.same(twin, { parts: { n: '1' }, quantities: { n: '1' } }, 'a duplicate within the window gets the stored record’s cost')
  t.equal(agg.get(['s'], 'n').n, 1, 'and the aggregate did not move')
  await agg.apply([charge], HOUR, 24 * HOUR)
  t.equal(agg.get(['s'], 'n').n, 2, 'the stored record itself (meterd reprice) is not its own duplicate')
  await agg.apply([{ ...charge, recordId: 'r3' }], 25 * HOUR, 24 * HOUR)
  t.equal(agg.get(['s'], 'n').n, 3, 'after the window the transactionId is new again and counts')
  await agg.apply([{ ...charge, recordId: 'r4' }], HOUR)
  t.equal(agg.get(['s'], 'n').n, 4, 'without a dedup window (no durable exporter) nothing is looked up')
})
