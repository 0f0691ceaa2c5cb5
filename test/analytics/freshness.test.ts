import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import t from 'tap'
import { completion, toolEvent } from '../fixtures/wire-examples.js'
import { API, get } from '../helpers/analytics.js'
import { call, startMeterd, writeConfig } from '../helpers/meterd.js'
import { PACKAGE_ROOT } from '../../src/core/paths.js'

const C = '/meter/v2/ai/completions'
const T = '/meter/v2/tool/events'
const CONFIG = {
  exporters: { analytics: { reprice_poll_ms: 100 } },
  service: {
    extensions: ['apikeys', 'tools'],
    pipelines: { usage: { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'], exporters: ['lmdb', 'analytics'] } },
  },
}
const recent = () => new Date(Date.now() - 60_000).toISOString()

t.test('a record counts as soon as its 201 is answered, once, late or not', async (t) => {
  const m = await startMeterd(t, { config: CONFIG })
  const key = await m.key({ team: 'team-a' })
  const before = (await get(m, key, 'summary')).body.period
  t.same([before.records, before.cost], [0, '0'])

  const body = completion({ requestTime: recent(), totalCost: 0.125, traceId: 'fresh-1', agent: 'now' })
  const res = await call(m.url + C, { key, body })
  t.equal(res.status, 201)
  // No wait: the requirement is 1 s, and the exporter adds the record before the 201 is sent.
  const after = (await get(m, key, 'summary')).body.period
  t.same([after.records, after.cost, after.traces], [1, '0.125', 1], 'visible in the very next query')

  const retry = await call(m.url + C, { key, body })
  t.same([retry.status, retry.body.id], [201, res.body.id], 'a retry is acknowledged with the first id')
  t.same((await get(m, key, 'summary')).body.period.records, 1, 'and not counted again')

  // A record the store finds already stored under its transactionId (another process stored it
  // after this one's check): the receiver's check is made to miss it, the store catches it.
  const findDuplicate = m.service.store.usage.findDuplicate
  m.service.store.usage.findDuplicate = () => undefined
  try {
    const twin = await call(m.url + C, { key, body })
    t.same([twin.status, twin.body.id], [201, res.body.id], 'the store kept the first record')
  } finally {
    m.service.store.usage.findDuplicate = findDuplicate
  }
  t.same((await get(m, key, 'summary')).body.period.records, 1, 'a duplicate the store skipped is not counted')

  // A late record: its event time three days ago; it counts in that period at once.
  const late = '2026-01-10T08:00:00.000Z'
  t.equal((await call(m.url + C, { key, body: completion({ requestTime: late, totalCost: 2, traceId: 'late-1' }) })).status, 201)
  const then = await get(m, key, 'agents/cost', { from: '2026-01-10T00:00:00Z', to: '2026-01-11T00:00:00Z' })
  t.same(then.body.totals.totalCost, '2', 'counted in its own period')
  t.same((await get(m, key, 'summary')).body.period.records, 1, 'and not in the last 24 hours')

  // A disabled tool's events are answered 201 and not metered: analytics does not count them.
  const tool = await call(`${m.url}${API}/tools`, { key, body: { toolId: 'off', name: 'off', toolType: 'REST_API', enabled: false, pricing: { currency: 'USD', elements: [{ name: 'calls', aggregationType: 'COUNT', unitPrice: '1' }] } } })
  t.equal(tool.status, 201, tool.text)
  t.equal((await call(m.url + T, { key, body: toolEvent({ toolId: 'off', timestamp: recent() }) })).status, 201)
  t.same((await get(m, key, 'summary')).body.period.toolEvents, 0, 'a disabled tool\'s event is not counted')
})

t.test('`meterd reprice` in another process, beside the running daemon, is reflected', async (t) => {
  const m = await startMeterd(t, { config: CONFIG })
  const key = await m.key({ team: 'team-a' })
  const unknownModel = completion({ provider: 'Acme', model: 'acme-1', requestTime: recent(), inputTokenCount: 1000, outputTokenCount: 500, totalTokenCount: 1500, traceId: 'rp', agent: 'pricer' })
  delete unknownModel.timeToFirstToken
  t.equal((await call(m.url + C, { key, body: unknownModel })).status, 201)
  t.equal((await call(m.url + T, { key, body: toolEvent({ toolId: 'later-tool', timestamp: recent(), traceId: 'rp', agent: 'pricer' }) })).status, 201)
  const before = await get(m, key, 'agents/cost')
  t.same([before.body.agents[0].completions, before.body.agents[0].toolEvents, before.body.agents[0].totalCost], [1, 1, '0'], 'stored unpriced: counted, at 0')

  const tool = await call(`${m.url}${API}/tools`, { key, body: { toolId: 'later-tool', name: 'later', toolType: 'REST_API', pricing: { currency: 'USD', elements: [{ name: 'calls', aggregationType: 'COUNT', unitPrice: '0.25' }] } } })
  t.equal(tool.status, 201, tool.text)
  const config = writeConfig(join(m.dataDir, '..'), {
    storage: { path: m.dataDir },
    processors: { pricing: { models: [{ provider: 'acme', model: 'acme-1', effective: '2026-01-01', input: 2, output: 10 }] } },
  }, 'reprice.yaml')
  const run = spawnSync(process.execPath, [join(PACKAGE_ROOT, 'bin/meterd.js'), 'reprice', '--config', config, '--json'], { encoding: 'utf8', timeout: 30_000 })
  t.equal(run.status, 0, run.stderr)
  t.match(JSON.parse(run.stdout), { examined: 2, priced: 2 })

  // 1000 × $2/M + 500 × $10/M = 0.007, and the tool's 0.25.
  let after: any
  const until = Date.now() + 5000
  do {
    await new Promise((r) => setTimeout(r, 50))
    after = (await get(m, key, 'agents/cost')).body.agents[0]
  } while (after.totalCost === '0' && Date.now() < until)
  t.same([after.tokenCost, after.toolCost, after.totalCost, after.completions, after.toolEvents], ['0.007', '0.25', '0.257', 1, 1], 'the new prices, counted once')
  t.equal((await get(m, key, 'traces/rp')).body.cost, '0.257', 'the trace detail reads the store: the same')
  t.equal((await get(m, key, 'traces/cost-distribution')).body.max, '0.257')
})
