import t from 'tap'
import { call } from '../helpers/meterd.js'
import { createTool, event, EVENTS, postEvent, startPricing, sum, TIERS, toolBody } from '../helpers/pricing.js'

// Issue 3's worked table: tiers up to 1,000 @ 0.010, up to 10,000 @ 0.008, unlimited @ 0.005.
// Events are posted one at a time; the period charge after each checkpoint is the sum of the
// per-event costs stored so far.
const CHECKPOINTS = [
  { units: [400, 600], at: 1000, volume: '10', graduated: '10' },
  { units: [4500, 4500], at: 10000, volume: '80', graduated: '82' },
  { units: [1], at: 10001, volume: '50.005', graduated: '82.005' },
  { units: [2000, 2999], at: 15000, volume: '75', graduated: '107' },
]

for (const mode of ['volume', 'graduated'] as const) {
  t.test(`worked table, ${mode} tiers, SUM posted event by event`, async (t) => {
    const m = await startPricing(t)
    const key = await m.key()
    const toolId = `units-${mode}`
    await createTool(m, key, toolBody(toolId, { name: 'units', aggregationType: 'SUM', tiersMode: mode, tiers: TIERS }))
    const costs: string[] = []
    for (const cp of CHECKPOINTS) {
      for (const u of cp.units) {
        const r = await postEvent(m, key, event(toolId, { usageMetadata: { units: u } }))
        t.equal(r.cost.source, 'registry')
        costs.push(r.cost.total)
      }
      t.equal(sum(costs), cp[mode], `${mode}: period charge at ${cp.at} units`)
    }
    if (mode === 'volume') t.equal(costs[4], '-29.995', 'crossing into a cheaper volume tier credits the difference')
  })
}

t.test('worked table with COUNT: one event = one unit (volume, first tier boundary)', async (t) => {
  const m = await startPricing(t)
  const key = await m.key()
  await createTool(m, key, toolBody('calls', { name: 'requests', aggregationType: 'COUNT', tiers: [{ upTo: 2, unitPrice: 0.01 }, { upTo: null, unitPrice: 0.005 }] }))
  const costs: string[] = []
  for (let i = 0; i < 3; i++) costs.push((await postEvent(m, key, event('calls'))).cost.total)
  t.same(costs, ['0.01', '0.01', '-0.005'], 'third call moves every unit to 0.005')
  t.equal(sum(costs), '0.015')
})

t.test('failed calls are metered; costUsd overrides the cost but the quantity still counts', async (t) => {
  const m = await startPricing(t)
  const key = await m.key()
  await createTool(m, key, toolBody('db', { name: 'rows', aggregationType: 'SUM', tiersMode: 'volume', tiers: TIERS }))
  const failed = await postEvent(m, key, event('db', { success: false, errorMessage: 'timeout', usageMetadata: { rows: 600 } }))
  t.equal(failed.cost.total, '6', 'a failed call is priced like any other')
  const override = await postEvent(m, key, event('db', { costUsd: 1.25, usageMetadata: { rows: 400 } }))
  t.equal(override.cost.total, '1.25')
  t.equal(override.cost.source, 'client')
  t.same(override.cost.quantities, { rows: '400' }, 'the overridden event still counts 400 rows')
  const next = await postEvent(m, key, event('db', { usageMetadata: { rows: 9000 } }))
  // 10,000 rows in the period now: C = 80; before this event C(1000) = 10.
  t.equal(next.cost.total, '70')
})

t.test('aggregates are per organization and per calendar month (UTC)', async (t) => {
  const m = await startPricing(t)
  const key = await m.key()
  await createTool(m, key, toolBody('q', { name: 'requests', aggregationType: 'COUNT', tiers: [{ upTo: 1, unitPrice: 1 }, { upTo: null, unitPrice: '0.5' }] }))
  t.equal((await postEvent(m, key, event('q'))).cost.total, '1')
  t.equal((await postEvent(m, key, event('q'))).cost.total, '0', 'second in the period: C(2) − C(1) = 1 − 1')
  t.equal((await postEvent(m, key, event('q', { organizationName: 'OtherOrg' }))).cost.total, '1', 'another organization starts its own aggregate')
  t.equal((await postEvent(m, key, event('q', { timestamp: '2026-12-01T00:00:00Z' }))).cost.total, '1', 'a new month starts a new period')
  t.equal((await postEvent(m, key, event('q', { timestamp: '2026-11-30T23:59:59.999Z' }))).cost.total, '0.5', 'the last instant of November is still November')
})

t.test('AVERAGE, MAXIMUM and DISTINCT over a period', async (t) => {
  const m = await startPricing(t)
  const key = await m.key()
  await createTool(m, key, {
    toolId: 'multi',
    name: 'multi',
    toolType: 'MCP Server',
    pricing: {
      elements: [
        { name: 'latency', aggregationType: 'AVERAGE', unitPrice: '0.001' },
        { name: 'pages', aggregationType: 'MAXIMUM', unitPrice: 0.1 },
        { name: 'user', aggregationType: 'DISTINCT', unitPrice: 2 },
      ],
    },
  })
  const a = await postEvent(m, key, event('multi', { usageMetadata: { latency: 100, pages: 5, user: 'u1' } }))
  t.same(a.cost.parts, { latency: '0.1', pages: '0.5', user: '2' })
  const b = await postEvent(m, key, event('multi', { usageMetadata: { latency: 200, pages: 3, user: 'u1' } }))
  t.same(b.cost.parts, { latency: '0.05', pages: '0', user: '0' }, 'average 150, max stays 5, u1 already seen')
  const c = await postEvent(m, key, event('multi', { usageMetadata: { latency: 0, pages: 8, user: 'u2' } }))
  t.same(c.cost.parts, { latency: '-0.05', pages: '0.3', user: '2' }, 'average 100, max 8, a second user')
  t.equal(sum([a.cost.total, b.cost.total, c.cost.total]), '4.9', 'C(final) = 100 × 0.001 + 8 × 0.1 + 2 × 2')
})

t.test('a tool event retried within the dedup window counts once; its transactionId reused after the window counts again', async (t) => {
  const m = await startPricing(t, { frozenNow: Date.UTC(2026, 10, 21, 12) })
  const key = await m.key()
  const tiers = [{ upTo: 1, unitPrice: '1' }, { upTo: null, unitPrice: '0.5' }]
  await createTool(m, key, toolBody('geo', { name: 'requests', aggregationType: 'COUNT', tiersMode: 'graduated', tiers }))
  const body = event('geo')
  const first = await call(`${m.url}/meter/v2/tool/events`, { key, body })
  t.equal((await call(`${m.url}/meter/v2/tool/events`, { key, body })).body.id, first.body.id, 'a retry gets the first id')
  m.clock.advance(25 * 3_600_000)
  const later = await call(`${m.url}/meter/v2/tool/events`, { key, body })
  t.not(later.body.id, first.body.id, 'after the window it is a new event')
  const list = await call(`${m.url}${EVENTS}?transactionId=${encodeURIComponent(body.transactionId as string)}`, { key })
  const costs = list.body._embedded.toolEventMetricResourceList.map((r: any) => r.cost?.total ?? r.totalCost)
  t.same(costs, ['0.5', '1'], 'the new event is counted: the second unit of the period, at the second tier')
})
