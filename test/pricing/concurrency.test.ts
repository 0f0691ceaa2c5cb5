import t from 'tap'
import { call } from '../helpers/meterd.js'
import { API, createTool, event, startPricing, sum, TIERS, toolBody } from '../helpers/pricing.js'
import { Decimal } from '../../src/domain/pricing/money.js'

// 1,000 tool events for one scope, all in flight at once, end with the same aggregate and the
// same period charge as the same events posted one after another (no lost update).

async function records(m: { url: string }, key: string, toolId: string, org: string): Promise<any[]> {
  const out: any[] = []
  for (let page = 0; page < 3; page++) {
    const res = await call(`${m.url}${API}/sources/metrics/tool/events?toolId=${toolId}&size=1000&page=${page}`, { key })
    out.push(...res.body._embedded.toolEventMetricResourceList.filter((r: any) => r.organizationName === org))
  }
  return out
}

t.test('1,000 concurrent events for one scope == sequential totals', async (t) => {
  const m = await startPricing(t)
  const key = await m.key()
  await createTool(m, key, toolBody('conc', { name: 'units', aggregationType: 'SUM', tiersMode: 'graduated', tiers: [{ upTo: 500, unitPrice: 0.01 }, { upTo: 2000, unitPrice: '0.008' }, { upTo: null, unitPrice: 0.005 }] }))
  const units = Array.from({ length: 1000 }, (_, i) => (i % 7) + 1) // 3,997 units in all, across every tier

  const concurrent = await Promise.all(
    units.map((u) => call(`${m.url}/meter/v2/tool/events`, { key, body: event('conc', { organizationName: 'Concurrent', usageMetadata: { units: u } }) })),
  )
  t.equal(concurrent.filter((r) => r.status === 201).length, 1000, 'every concurrent event answered 201')

  for (const u of units) {
    const r = await call(`${m.url}/meter/v2/tool/events`, { key, body: event('conc', { organizationName: 'Sequential', usageMetadata: { units: u } }) })
    if (r.status !== 201) t.fail(`sequential: ${r.status}`)
  }

  const ra = await records(m, key, 'conc', 'Concurrent')
  const a = ra.map((r) => r.cost.total)
  const b = (await records(m, key, 'conc', 'Sequential')).map((r) => r.cost.total)
  t.equal(a.length, 1000)
  t.equal(b.length, 1000)
  // C(3997) graduated = 500×0.01 + 1500×0.008 + 1997×0.005 = 5 + 12 + 9.985.
  t.equal(sum(b), '26.985', 'sequential period charge')
  t.equal(sum(a), '26.985', 'concurrent period charge is the same, to the last digit')
  const quantities = ra.reduce((s: Decimal, r: any) => s.plus(r.cost.quantities.units), new Decimal(0))
  t.equal(quantities.toFixed(), '3997', 'no unit lost')
})
