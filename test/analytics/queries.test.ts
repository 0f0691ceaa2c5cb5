import { Decimal } from 'decimal.js'
import t from 'tap'
import {
  eq,
  get,
  ok200,
  refAgents,
  refDistribution,
  refNumberPercentile,
  refProviders,
  refTotals,
  registerTool,
  seed,
  select,
  storedCost,
  type Query,
  type SeedRecord,
} from '../helpers/analytics.js'
import { dataset, DAY, HOUR, NOW, RANK_DAY, REGISTERED, SOLO_DAY } from '../helpers/analytics-dataset.js'
import { startMeterd } from '../helpers/meterd.js'

const iso = (ms: number) => new Date(ms).toISOString()
const WINDOW: Query = { from: iso(NOW - DAY), to: iso(NOW) }
const PREVIOUS: Query = { from: iso(NOW - 2 * DAY), to: iso(NOW - DAY) }

// No rate limiting here: the clock is frozen, so every request would fall in one window.
const CONFIG = {
  service: {
    extensions: ['apikeys', 'tools'],
    pipelines: { usage: { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'], exporters: ['lmdb', 'analytics'] } },
  },
}

const data = dataset()

t.test('analytics answers match a reference computed from the seeded records', async (t) => {
  const m = await startMeterd(t, { config: CONFIG, frozenNow: NOW })
  const key = await m.key({ team: 'team-a' })
  for (const tool of REGISTERED) await registerTool(m, key, tool)
  await seed(m, key, data)
  const inWindow = select(data, WINDOW)

  t.test('agents/cost: token vs tool cost per agent, the no-agent group as null', async (t) => {
    const res = await get(m, key, 'agents/cost')
    ok200(t, res)
    t.equal(res.body.from, WINDOW.from, 'the default period is the 24 hours before now')
    t.equal(res.body.to, WINDOW.to)
    const ref = refAgents(inWindow, REGISTERED)
    t.same(new Set(res.body.agents.map((a: any) => a.agent)), new Set(ref.keys()), 'one group per agent, null for records without one')
    for (const a of res.body.agents) {
      const r = ref.get(a.agent)!
      t.ok(eq(a.tokenCost, r.tokenCost) && eq(a.toolCost, r.toolCost) && eq(a.totalCost, r.tokenCost.plus(r.toolCost)), `${a.agent}: costs ${a.tokenCost} + ${a.toolCost}`)
      t.same([a.completions, a.toolEvents, a.tokens.total], [r.completions, r.toolEvents, r.tokens], `${a.agent}: counts`)
    }
    const noAgent = res.body.agents.find((a: any) => a.agent === null)
    t.ok(noAgent && noAgent.toolEvents > 0, 'tool events without an agent are in the null group')
    const costs = res.body.agents.map((a: any) => new Decimal(a.totalCost))
    t.ok(costs.every((c: Decimal, i: number) => i === 0 || costs[i - 1].gte(c)), 'largest total first by default')
    const total = inWindow.reduce((s, r) => s.plus(storedCost(r, REGISTERED)), new Decimal(0))
    t.ok(eq(res.body.totals.totalCost, total), `totals add up exactly (${res.body.totals.totalCost})`)

    const byName = await get(m, key, 'agents/cost', { sort: 'agent', organizationName: 'Acme', environment: 'prod' })
    const refF = refAgents(select(data, { ...WINDOW, filters: { organizationName: 'Acme', environment: 'prod' } }), REGISTERED)
    t.same(byName.body.agents.map((a: any) => a.agent), [...refF.keys()].filter((k) => k !== null).sort().concat(refF.has(null) ? [null] : []), 'sort=agent: names ascending, no agent last')
    for (const a of byName.body.agents) t.ok(eq(a.totalCost, refF.get(a.agent)!.tokenCost.plus(refF.get(a.agent)!.toolCost)), `filtered ${a.agent}`)
    t.same(byName.body.filters, { organizationName: 'Acme', environment: 'prod' })

    // The subscriber is kept apart from the other dimensions (a column of its own): filter on it and another.
    const sub = await get(m, key, 'agents/cost', { subscriberId: 'u2', productName: 'Gold' })
    const refS = refAgents(select(data, { ...WINDOW, filters: { subscriberId: 'u2', productName: 'Gold' } }), REGISTERED)
    t.same(new Set(sub.body.agents.map((a: any) => a.agent)), new Set(refS.keys()))
    for (const a of sub.body.agents) t.ok(eq(a.totalCost, refS.get(a.agent)!.tokenCost.plus(refS.get(a.agent)!.toolCost)) && a.completions === refS.get(a.agent)!.completions, `subscriber u2, Gold: ${a.agent}`)
  })

  t.test('tools/cost-over-time: a series per tool, every bucket present, UTC-aligned', async (t) => {
    const res = await get(m, key, 'tools/cost-over-time', { interval: 'hour' })
    ok200(t, res)
    t.equal(res.body.buckets.length, 24, '24 hourly buckets in the default period')
    t.equal(res.body.buckets[0], WINDOW.from)
    const tools = inWindow.filter((r) => r.kind === 'tool')
    t.same(res.body.tools.map((x: any) => x.toolId).sort(), [...new Set(tools.map((r) => r.toolId))].sort(), 'every tool with events, unregistered ones included')
    for (const tool of res.body.tools) {
      t.equal(tool.series.length, 24, `${tool.toolId}: every bucket, empty ones included`)
      for (const b of tool.series) {
        const start = Date.parse(b.start)
        const mine = tools.filter((r) => r.toolId === tool.toolId && Date.parse(r.time) >= start && Date.parse(r.time) < start + HOUR)
        const cost = mine.reduce((s, r) => s.plus(storedCost(r, REGISTERED)), new Decimal(0))
        const timed = mine.filter((r) => r.durationMs !== undefined)
        const mean = timed.length ? timed.reduce((s, r) => s + r.durationMs!, 0) / timed.length : null
        if (!eq(b.cost, cost) || b.events !== mine.length || b.errors !== mine.filter((r) => r.error).length || (mean === null ? b.meanDurationMs !== null : Math.abs(b.meanDurationMs - mean) > 1e-9))
          t.fail(`${tool.toolId} ${b.start}`, { got: b, want: { cost: cost.toString(), events: mine.length, mean } })
      }
      t.ok(tool.series.some((b: any) => b.events === 0 && b.cost === '0' && b.meanDurationMs === null) || tool.series.every((b: any) => b.events > 0), `${tool.toolId}: an empty bucket reads 0 / null`)
    }
    // Days are UTC days: the trace spanning midnight puts its tool event in the 22nd.
    const days = await get(m, key, 'tools/cost-over-time', { interval: 'day', from: '2026-11-21T06:00:00Z', to: '2026-11-22T06:00:00Z', toolId: 'scrape' })
    t.same(days.body.buckets, ['2026-11-21T00:00:00.000Z', '2026-11-22T00:00:00.000Z'])
    const scrape = select(data, { from: '2026-11-21T06:00:00Z', to: '2026-11-22T06:00:00Z', filters: { toolId: 'scrape' } })
    const on22 = scrape.filter((r) => r.time >= '2026-11-22').reduce((s, r) => s.plus(r.cost), new Decimal(0))
    t.ok(eq(days.body.tools[0].series[1].cost, on22), 'the second bucket holds the events of the 22nd from 00:00 to 06:00')
  })

  t.test('traces/cost-distribution: nearest-rank percentiles on exact rank boundaries, ties', async (t) => {
    const res = await get(m, key, 'traces/cost-distribution', { ...RANK_DAY, threshold: '0.1' })
    ok200(t, res)
    // 20 traces: p50 is rank 10, p90 rank 18, p95 rank 19 (19/20 is exactly 95 %), p99 rank 20.
    t.same(res.body.percentiles, { p50: '0.1', p90: '0.18', p95: '0.19', p99: '0.2' })
    t.same([res.body.count, res.body.min, res.body.max, res.body.mean, res.body.total], [20, '0.01', '0.2', '0.1045', '2.09'])
    t.same(res.body.above, { count: 9, share: 0.45 }, 'strictly above the threshold: the tie at 0.1 is not above it')
    t.equal(res.body.threshold, '0.1')
    t.equal(res.body.histogram.counts.reduce((a: number, b: number) => a + b, 0), 20, 'the histogram counts every trace')
    t.equal(res.body.histogram.bounds.length, res.body.histogram.counts.length + 1)
    const bounds = res.body.histogram.bounds.map((b: string) => new Decimal(b))
    t.ok(bounds[0].lte('0.01') && bounds[bounds.length - 1].gt('0.2'), 'bounds cover min..max')
    for (let k = 0; k < res.body.histogram.counts.length; k++) {
      const n = ['0.01', '0.02', '0.03', '0.04', '0.05', '0.06', '0.07', '0.08', '0.09', '0.1', '0.1', '0.12', '0.13', '0.14', '0.15', '0.16', '0.17', '0.18', '0.19', '0.2'].filter((c) => bounds[k].lte(c) && bounds[k + 1].gt(c)).length
      t.equal(res.body.histogram.counts[k], n, `bucket [${bounds[k]}, ${bounds[k + 1]})`)
    }

    const at = await get(m, key, 'traces/cost-distribution', { ...RANK_DAY, threshold: '0.19' })
    t.same(at.body.above, { count: 1, share: 0.05 }, 'a threshold equal to a trace cost does not count that trace')

    const broad = await get(m, key, 'traces/cost-distribution', { threshold: '0.02' })
    const ref = refDistribution(inWindow, REGISTERED, '0.02')
    t.equal(broad.body.count, ref.count, `${ref.count} traces in the default period`)
    for (const k of ['p50', 'p90', 'p95', 'p99'] as const) t.ok(eq(broad.body.percentiles[k], ref[k]), `${k} ${broad.body.percentiles[k]}`)
    t.ok(eq(broad.body.min, ref.min) && eq(broad.body.max, ref.max) && eq(broad.body.mean, ref.mean) && eq(broad.body.total, ref.total), 'min, max, mean, total')
    t.equal(broad.body.above.count, ref.above)
    t.ok(ref.costs.some((c, i) => i > 0 && c.eq(ref.costs[i - 1])), 'the broad set has ties too')
    for (const k of ['p50', 'p90', 'p95', 'p99'] as const) t.ok(ref.costs.some((c) => eq(broad.body.percentiles[k], c)), `${k} is a real trace's cost`)

    const solo = await get(m, key, 'traces/cost-distribution', { ...SOLO_DAY, threshold: '1' })
    t.same([solo.body.count, solo.body.min, solo.body.max, solo.body.mean, solo.body.percentiles], [1, '0.75', '0.75', '0.75', { p50: '0.75', p90: '0.75', p95: '0.75', p99: '0.75' }], 'one trace: every statistic is its cost')
    t.same(solo.body.histogram.counts, [1])
    t.same(solo.body.above, { count: 0, share: 0 })

    const empty = await get(m, key, 'traces/cost-distribution', { from: '2020-01-01T00:00:00Z', to: '2020-02-01T00:00:00Z', threshold: '0.5' })
    t.same(empty.body, {
      teamId: 'team-a', from: '2020-01-01T00:00:00.000Z', to: '2020-02-01T00:00:00.000Z', filters: {},
      count: 0, total: '0', min: null, max: null, mean: null, percentiles: { p50: null, p90: null, p95: null, p99: null },
      histogram: { bounds: [], counts: [] }, threshold: '0.5', above: { count: 0, share: 0 },
    }, 'an empty period')
  })

  t.test('traces: by cost or time, minCost, pages; a trace in detail', async (t) => {
    const costs = new Map<string, Decimal>()
    for (const r of inWindow) if (r.traceId) costs.set(r.traceId, (costs.get(r.traceId) ?? new Decimal(0)).plus(storedCost(r, REGISTERED)))
    const byCost = [...costs].sort((a, b) => b[1].comparedTo(a[1]) || (a[0] < b[0] ? -1 : 1))
    const page0 = await get(m, key, 'traces', { size: 7 })
    ok200(t, page0)
    t.same(page0.body.page, { size: 7, totalElements: costs.size, totalPages: Math.ceil(costs.size / 7), number: 0 })
    t.same(page0.body.traces.map((x: any) => x.traceId), byCost.slice(0, 7).map(([id]) => id), 'most expensive first, ties by traceId')
    const page2 = await get(m, key, 'traces', { size: 7, page: 2 })
    t.same(page2.body.traces.map((x: any) => x.traceId), byCost.slice(14, 21).map(([id]) => id), 'page 2')
    for (const x of [...page0.body.traces, ...page2.body.traces]) t.ok(eq(x.cost, costs.get(x.traceId)!), `${x.traceId} costs ${x.cost}`)

    const min = await get(m, key, 'traces', { minCost: '0.05', size: 1000, order: 'asc' })
    const want = byCost.filter(([, c]) => c.gte('0.05')).reverse()
    t.same(min.body.traces.map((x: any) => x.traceId), want.map(([id]) => id), 'minCost keeps traces costing at least it; order=asc')

    const starts = new Map<string, number>()
    for (const r of inWindow) if (r.traceId) starts.set(r.traceId, Math.min(starts.get(r.traceId) ?? Infinity, Date.parse(r.time)))
    const byTime = await get(m, key, 'traces', { sort: 'time', size: 5 })
    t.same(byTime.body.traces.map((x: any) => x.traceId), [...starts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, 5).map(([id]) => id), 'sort=time: latest start first')

    const span = (await get(m, key, 'traces', { size: 1000 })).body.traces.find((x: any) => x.traceId === 'span')
    t.same([span.cost, span.tokenCost, span.toolCost, span.start, span.end, span.agents], ['1.05', '0.3', '0.75', '2026-11-21T23:30:00.000Z', '2026-11-22T00:31:00.000Z', ['planner']], 'a trace spanning two days, in one piece')

    const detail = await get(m, key, 'traces/span')
    ok200(t, detail)
    t.same([detail.body.cost, detail.body.tokenCost, detail.body.toolCost, detail.body.durationMs, detail.body.agents], ['1.05', '0.3', '0.75', 61 * 60_000, ['planner']])
    t.same(detail.body.records.map((r: any) => [r.kind, r.eventTime, r.agent, r.cost]), [
      ['completion', '2026-11-21T23:30:00.000Z', 'planner', '0.3'],
      ['tool', '2026-11-22T00:30:00.000Z', null, '0.75'],
    ], 'its records in time order, the tool event without an agent')
    t.equal(detail.body.records[0].tokens.total, 1200)
    t.equal(detail.body.records[1].toolId, 'scrape')
    const halfDetail = await get(m, key, 'traces/span', { to: '2026-11-22T00:00:00Z' })
    t.same([halfDetail.body.cost, halfDetail.body.records.length], ['0.3', 1], 'from/to apply to a trace detail when given')
    const missing = await get(m, key, 'traces/no-such-trace')
    t.same([missing.status, missing.body.error.code, missing.body.error.param], [404, 'resource_not_found', 'traceId'])
  })

  t.test('providers and models: cost, tokens, requests, error rate, latency and TTFT by nearest rank', async (t) => {
    for (const by of ['provider', 'model'] as const) {
      const res = await get(m, key, `${by}s`)
      ok200(t, res)
      const ref = refProviders(inWindow, REGISTERED, by)
      const list = res.body[`${by}s`]
      t.equal(list.length, ref.size, `${ref.size} ${by}s; "OpenAI" and "openai" are one provider`)
      for (const p of list) {
        const r = ref.get(by === 'provider' ? p.provider : `${p.provider}/${p.model}`)!
        t.ok(r, `${p.provider} ${p.model ?? ''} is expected`)
        t.ok(eq(p.cost, r.cost), `${p.provider} ${p.model ?? ''} cost ${p.cost}`)
        t.same([p.requests, p.errors, p.tokens.input, p.tokens.total], [r.requests, r.errors, r.input, r.total])
        t.equal(p.errorRate, r.errors / r.requests)
        t.same(p.latencyMs, { p50: refNumberPercentile(r.latency, 50), p95: refNumberPercentile(r.latency, 95) })
        t.same(p.timeToFirstTokenMs, { p50: refNumberPercentile(r.ttft, 50), p95: refNumberPercentile(r.ttft, 95) })
      }
    }
  })

  t.test('filters on a subscriber and a provider spelt another way', async (t) => {
    const res = await get(m, key, 'models', { subscriberId: 'u1', provider: 'OPENAI' })
    const ref = refProviders(select(data, { ...WINDOW, filters: { subscriberId: 'u1', provider: 'openai' } }), REGISTERED, 'model')
    t.equal(res.body.models.length, ref.size)
    for (const p of res.body.models) t.ok(eq(p.cost, ref.get(`${p.provider}/${p.model}`)!.cost) && p.requests === ref.get(`${p.provider}/${p.model}`)!.requests, `${p.model} for u1`)
    const none = await get(m, key, 'summary', { subscriberId: 'nobody' })
    t.same([none.body.period.records, none.body.period.cost], [0, '0'], 'an unknown value matches nothing')
  })

  t.test('summary: the period and the one before it', async (t) => {
    const res = await get(m, key, 'summary')
    ok200(t, res)
    for (const [name, q] of [['period', WINDOW], ['previousPeriod', PREVIOUS]] as const) {
      const got = res.body[name]
      const ref = refTotals(select(data, q), REGISTERED)
      t.same([got.from, got.to], [q.from, q.to])
      t.ok(eq(got.cost, ref.cost) && eq(got.tokenCost, ref.tokenCost) && eq(got.toolCost, ref.toolCost), `${name}: ${got.cost}`)
      t.same([got.completions, got.toolEvents, got.errors, got.tokens.total, got.traces], [ref.completions, ref.toolEvents, ref.errors, ref.tokens, ref.traces], `${name}: counts`)
    }
    const diff = new Decimal(res.body.period.cost).minus(res.body.previousPeriod.cost)
    t.ok(eq(res.body.change.cost.replace('+', ''), diff), `change ${res.body.change.cost}`)
  })
})

t.test('a stored duration past the range of dates leaves its trace with an end of null, never a failed answer', async (t) => {
  const m = await startMeterd(t, { config: CONFIG, frozenNow: NOW })
  const key = await m.key({ team: 'team-a' })
  const time = iso(NOW - HOUR)
  // REST takes a durationMs up to 2^53 - 1 ms (it took 1e300 before): added to a time of today it
  // is past the last time a Date holds (8.64e15 ms), and put the trace's end past a Date.
  await seed(m, key, [
    { kind: 'tool', time, cost: '0.01', toolId: 'slow-tool', traceId: 'trace-far', durationMs: Number.MAX_SAFE_INTEGER },
    { kind: 'completion', time, cost: '0.02', traceId: 'trace-far', durationMs: 500 },
    { kind: 'completion', time, cost: '0.03', traceId: 'trace-near', durationMs: 800 },
  ])
  for (const sort of ['cost', 'time']) {
    const list = await get(m, key, 'traces', { sort })
    ok200(t, list)
    const far = list.body.traces.find((x: any) => x.traceId === 'trace-far')
    t.match(far, { start: time, end: null }, `traces?sort=${sort}: the far trace has no end`)
    t.match(list.body.traces.find((x: any) => x.traceId === 'trace-near'), { start: time, end: iso(NOW - HOUR + 800), durationMs: 800 }, 'the others are unchanged')
  }
  const detail = await get(m, key, 'traces/trace-far')
  ok200(t, detail)
  t.match(detail.body, { start: time, end: null, completions: 1, toolEvents: 1 })
  t.equal(detail.body.records.find((r: any) => r.kind === 'tool').durationMs, Number.MAX_SAFE_INTEGER, 'the record keeps its duration as stored')
})

t.test('money stays exact in sums far past what a double holds', async (t) => {
  const m = await startMeterd(t, { config: CONFIG, frozenNow: NOW })
  const key = await m.key({ team: 'team-big' })
  // 2,000 records of $4,999.999999999 in one trace (each past 2^52 units of 10^-12 USD, the sum past
  // 2^63), one of $0.000000000001 and one of $12,345.678901234: amounts a double cannot add exactly.
  const rec: SeedRecord = { kind: 'completion', time: iso(NOW - HOUR), cost: '0', traceId: 'big', agent: 'spender', durationMs: 10 }
  const cheap: SeedRecord = { ...rec, cost: '0.000000000001', traceId: 'tiny' }
  const records = [...Array.from({ length: 2000 }, () => ({ ...rec, cost: '4999.999999999' })), cheap, { ...rec, cost: '12345.678901234', traceId: 'huge' }]
  await seed(m, key, records)
  const exact = new Decimal('4999.999999999').times(2000).plus('0.000000000001').plus('12345.678901234')
  const agents = await get(m, key, 'agents/cost')
  t.equal(agents.body.totals.totalCost, exact.toFixed(), 'the total, to the last of 12 places')
  const dist = await get(m, key, 'traces/cost-distribution')
  t.same([dist.body.count, dist.body.min, dist.body.max], [3, '0.000000000001', new Decimal('4999.999999999').times(2000).toFixed()])
  t.equal(dist.body.percentiles.p50, '12345.678901234')
  const list = await get(m, key, 'traces')
  t.same(list.body.traces.map((x: any) => x.traceId), ['big', 'huge', 'tiny'])
})
