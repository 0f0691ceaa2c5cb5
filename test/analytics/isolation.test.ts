import t from 'tap'
import { ANALYTICS, get, seed, type SeedRecord } from '../helpers/analytics.js'
import { call, startMeterd } from '../helpers/meterd.js'

const NOW = Date.parse('2026-11-22T12:00:00.000Z')
const CONFIG = {
  service: {
    extensions: ['apikeys'],
    pipelines: { usage: { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'], exporters: ['lmdb', 'analytics'] } },
  },
}

// Every endpoint, with what "nothing of the other team" looks like in its answer.
const ENDPOINTS: [path: string, empty: (body: any) => boolean][] = [
  ['agents/cost', (b) => b.agents.length === 0],
  ['tools/cost-over-time', (b) => b.tools.length === 0],
  ['traces/cost-distribution', (b) => b.count === 0],
  ['traces', (b) => b.traces.length === 0 && b.page.totalElements === 0],
  ['providers', (b) => b.providers.length === 0],
  ['models', (b) => b.models.length === 0],
  ['summary', (b) => b.period.records === 0 && b.period.cost === '0'],
]

const records: SeedRecord[] = [
  { kind: 'completion', time: '2026-11-22T10:00:00.000Z', cost: '0.5', traceId: 'shared-trace', agent: 'a1', durationMs: 100, provider: 'OpenAI' },
  { kind: 'tool', time: '2026-11-22T10:00:01.000Z', cost: '0', traceId: 'shared-trace', toolId: 'search', durationMs: 5 },
]

t.test('every endpoint answers for the key\'s team only', async (t) => {
  const m = await startMeterd(t, { config: CONFIG, frozenNow: NOW })
  const a = await m.key({ team: 'team-a', account: 'acct-a' })
  const b = await m.key({ team: 'team-b', account: 'acct-b' })
  await seed(m, a, records)
  for (const [path, empty] of ENDPOINTS) {
    const mine = await get(m, a, path)
    t.equal(mine.status, 200, `${path}: team-a`)
    t.notOk(empty(mine.body), `${path}: team-a sees its records`)
    const other = await get(m, b, path)
    t.equal(other.status, 200, `${path}: team-b`)
    t.ok(empty(other.body), `${path}: team-b sees none of team-a's`)
    t.equal(other.body.teamId, 'team-b')
    const asked = await get(m, b, path, { teamId: 'team-a' })
    t.same([asked.status, asked.body.error?.code, asked.body.error?.param], [403, 'team_mismatch', 'teamId'], `${path}: teamId of another team is refused`)
    t.equal((await get(m, a, path, { teamId: 'team-a' })).status, 200, `${path}: its own teamId is fine`)
  }
  t.equal((await get(m, a, 'traces/shared-trace')).status, 200)
  const detail = await get(m, b, 'traces/shared-trace')
  t.same([detail.status, detail.body.error.code], [404, 'resource_not_found'], 'a trace of another team does not exist for this one')
  t.equal((await get(m, b, 'traces/shared-trace', { teamId: 'team-a' })).status, 403)

  // The same traceId in team-b is team-b's own trace.
  await seed(m, b, [{ ...records[0], cost: '0.25' }])
  t.equal((await get(m, a, 'traces/shared-trace')).body.cost, '0.5')
  t.equal((await get(m, b, 'traces/shared-trace')).body.cost, '0.25')
})

t.test('the analytics:read scope is needed, and the analytics bucket counts the calls', async (t) => {
  const m = await startMeterd(t, { config: { ...CONFIG, service: { ...CONFIG.service, extensions: ['apikeys', 'ratelimit'] } } })
  const writer = await m.key({ team: 'team-a', scopes: ['metering:write'] })
  const reader = await m.key({ team: 'team-a', scopes: ['analytics:read'] })
  for (const [path] of ENDPOINTS) {
    const res = await get(m, writer, path)
    t.same([res.status, res.body.error.code], [403, 'insufficient_scope'], `${path} needs analytics:read`)
  }
  const res = await get(m, reader, 'summary')
  t.equal(res.status, 200)
  t.equal(res.headers.get('x-ratelimit-bucket'), 'analytics')
  t.equal((await call(`${m.url}${ANALYTICS}/summary`)).status, 401, 'no key, no answer')
})

t.test('a bad parameter is a 400 naming it', async (t) => {
  const m = await startMeterd(t, { config: CONFIG, frozenNow: NOW })
  const key = await m.key({ team: 'team-a' })
  const cases: [path: string, query: Record<string, string>, param: string][] = [
    ['agents/cost', { from: 'yesterday' }, 'from'],
    ['agents/cost', { to: '2026-13-01T00:00:00Z' }, 'to'],
    ['agents/cost', { from: '2026-11-22T00:00:00Z', to: '2026-11-21T00:00:00Z' }, 'to'],
    ['agents/cost', { from: '2026-11-23T00:00:00Z' }, 'from'],
    ['agents/cost', { agnet: 'planner' }, 'agnet'],
    ['agents/cost', { sort: 'price' }, 'sort'],
    ['agents/cost', { order: 'up' }, 'order'],
    ['agents/cost', { agent: 'x'.repeat(256) }, 'agent'],
    ['tools/cost-over-time', { interval: 'week' }, 'interval'],
    ['tools/cost-over-time', { interval: 'minute', from: '2026-11-01T00:00:00Z' }, 'interval'],
    ['traces/cost-distribution', { threshold: '-1' }, 'threshold'],
    ['traces/cost-distribution', { threshold: '0.1234567890123' }, 'threshold'],
    ['traces/cost-distribution', { buckets: '0' }, 'buckets'],
    ['traces/cost-distribution', { buckets: '1000' }, 'buckets'],
    ['traces', { minCost: 'cheap' }, 'minCost'],
    ['traces', { sort: 'name' }, 'sort'],
    ['traces', { page: '-1' }, 'page'],
    ['traces', { size: '0' }, 'size'],
    ['traces/abc', { from: 'x' }, 'from'],
    ['traces/abc', { sort: 'cost' }, 'sort'],
    ['providers', { interval: 'hour' }, 'interval'],
    ['models', { model: 'a', from: 'now' }, 'from'],
    ['summary', { environment: 'prod', to: '2026-11-22' }, 'to'],
  ]
  for (const [path, query, param] of cases) {
    const res = await get(m, key, path, query)
    t.same([res.status, res.body?.error?.type, res.body?.error?.param], [400, 'invalid_request_error', param], `${path}?${new URLSearchParams(query)} → 400 naming ${param}: ${res.body?.error?.message}`)
  }
  const twice = await call(`${m.url}${ANALYTICS}/agents/cost?agent=a&agent=b`, { key })
  t.same([twice.status, twice.body.error.param], [400, 'agent'], 'a filter given twice')
  // A whole day by minute is within the bound: 1,440 buckets.
  const day = await get(m, key, 'tools/cost-over-time', { interval: 'minute' })
  t.same([day.status, day.body.buckets.length], [200, 1440])
})
