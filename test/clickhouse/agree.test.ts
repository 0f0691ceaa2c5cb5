// Both analytics backends on one data set: a meterd answering from its in-memory index and one
// answering from the ClickHouse table the first one's clickhouse exporter filled give the same
// answer, byte for byte, to every analytics endpoint over many ranges, filters and options —
// also after `meterd reprice` has priced records the exporter had already inserted.
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import t from 'tap'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { haveClickHouse, startClickHouse } from '../helpers/clickhouse-server.js'
import { ANALYTICS, bodyOf, registerTool, seed, type SeedRecord } from '../helpers/analytics.js'
import { dataset, DAY, HOUR, NOW, RANK_DAY, REGISTERED, SOLO_DAY } from '../helpers/analytics-dataset.js'
import { call, startMeterd, writeConfig } from '../helpers/meterd.js'

if (!haveClickHouse) {
  t.fail('clickhouse-server is not installed (.ci/run installs it)')
  process.exit(1)
}

const iso = (ms: number) => new Date(ms).toISOString()
const PIPELINE = { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'], exporters: ['lmdb', 'analytics', 'clickhouse'] }

/** The analytics data set, plus amounts past 2^52 units (the exact BigInt paths) and a long trace. */
function records(): SeedRecord[] {
  const out = dataset()
  out.push({ kind: 'completion', time: '2026-11-22T01:00:00.000Z', cost: '9000.5', traceId: 'whale', agent: 'planner', provider: 'Anthropic', model: 'claude-sonnet-4-5', durationMs: 10 })
  out.push({ kind: 'completion', time: '2026-11-22T01:00:01.000Z', cost: '4600.25', traceId: 'whale', agent: 'writer', provider: 'Anthropic', model: 'claude-sonnet-4-5', durationMs: 12 })
  out.push({ kind: 'completion', time: '2026-11-22T02:00:00.000Z', cost: '7777.000000000001', traceId: 'whale-2', provider: 'OpenAI', model: 'gpt-4o', durationMs: 7 })
  return out
}

t.test('the embedded and the ClickHouse backends answer every analytics endpoint the same', async (t) => {
  const ch = await startClickHouse()
  t.teardown(async () => {
    await ch.stop()
    ch.remove()
  })
  const clickhouse = { endpoint: ch.url, database: 'agree', batch_size: 200, flush_interval_ms: 50 }
  const data = records()
  const embedded = await startMeterd(t, {
    frozenNow: NOW,
    config: { exporters: { clickhouse, analytics: { reprice_poll_ms: 50 } }, service: { extensions: ['apikeys', 'tools'], pipelines: { usage: PIPELINE } } },
  })
  const key = await embedded.key({ team: 'team-a' })
  for (const tool of REGISTERED) await registerTool(embedded, key, tool)
  await seed(embedded, key, data)
  // Another team's records must not leak into team-a's answers on either side.
  const other = await embedded.key({ team: 'team-b', account: 'acct-2' })
  await seed(embedded, other, data.slice(0, 60))
  // A completion of a model the price book does not know: stored unpriced, priced by `meterd reprice` below.
  const unknown = bodyOf({ kind: 'completion', time: '2026-11-22T01:30:00.000Z', cost: '0', traceId: 'whale', agent: 'planner', provider: 'Acme', model: 'acme-1', durationMs: 5 })
  delete unknown.totalCost
  Object.assign(unknown, { inputTokenCount: 1_000_000, outputTokenCount: 100_000, totalTokenCount: 1_100_000 })
  t.equal((await call(`${embedded.url}/meter/v2/ai/completions`, { key, body: unknown })).status, 201, 'the acme-1 completion is stored')
  const stored = data.length + 60 + 1

  const sql = async (query: string) => (await (await fetch(`${ch.url}/?query=${encodeURIComponent(query)}`)).text()).trim()
  const count = async () => Number(await sql('SELECT count() FROM agree.usage_records'))
  const end = Date.now() + 20_000
  while ((await count().catch(() => 0)) < stored) {
    if (Date.now() > end) throw new Error('the clickhouse exporter did not deliver the data set')
    await new Promise((r) => setTimeout(r, 50))
  }
  t.equal(await count(), stored, 'every stored record is in ClickHouse once')

  const fromClickHouse = await startMeterd(t, {
    frozenNow: NOW,
    config: {
      exporters: { clickhouse, analytics: { backend: 'clickhouse' } },
      service: { extensions: ['apikeys', 'tools'], pipelines: { usage: PIPELINE } },
    },
  })
  const chKey = await fromClickHouse.key({ team: 'team-a' })
  const summaries = () =>
    Promise.all([embedded, fromClickHouse].map(async (m, i) => (await call(`${m.url}${ANALYTICS}/summary?from=2026-11-01T00:00:00.000Z`, { key: i === 0 ? key : chKey })).text))
  const [before, beforeCh] = await summaries()
  t.equal(beforeCh, before, 'before the reprice: the same summary')

  // `meterd reprice` in another process beside the running daemon, once 'ghost' is registered
  // (its events were stored unpriced) and acme-1 is in the price book: records ClickHouse holds
  // already get a new cost. Another team's 'ghost' events stay unpriced (the tool is team-a's).
  await registerTool(embedded, key, 'ghost')
  const repriceConfig = writeConfig(join(embedded.dataDir, '..'), {
    storage: { path: embedded.dataDir },
    processors: { pricing: { models: [{ provider: 'acme', model: 'acme-1', effective: '2026-01-01', input: 2, output: 10 }] } },
  }, 'reprice.yaml')
  const run = spawnSync(process.execPath, [join(PACKAGE_ROOT, 'bin/meterd.js'), 'reprice', '--config', repriceConfig, '--json'], { encoding: 'utf8', timeout: 60_000 })
  t.equal(run.status, 0, `meterd reprice succeeds ${run.stderr}`)
  const { priced } = JSON.parse(run.stdout) as { priced: number }
  const ghosts = data.filter((r) => r.kind === 'tool' && r.toolId === 'ghost').length
  t.equal(priced, ghosts + 1, `team-a's ${ghosts} 'ghost' events and the acme-1 completion are priced`)
  const settled = Date.now() + 20_000
  for (;;) {
    const [a, b] = await summaries()
    const versions = Number(await sql('SELECT count() FROM agree.usage_records WHERE version > 0').catch(() => '0'))
    if (a !== before && versions === priced && b === a) break
    if (Date.now() > settled) {
      t.equal(versions, priced, 'every repriced record has its new row in ClickHouse')
      t.not(a, before, 'the embedded index follows the reprice')
      t.equal(b, a, 'ClickHouse answers with the new prices')
      throw new Error('the reprice did not reach both backends')
    }
    await new Promise((r) => setTimeout(r, 100))
  }
  t.pass(`the reprice reached both backends: ${priced} new rows in ClickHouse, each record counted once at its new price`)

  const ranges: Record<string, string>[] = [
    {},
    { from: iso(NOW - 2 * DAY), to: iso(NOW) },
    { from: iso(NOW - 3 * HOUR), to: iso(NOW - HOUR) },
    { from: '2026-11-01T00:00:00.000Z', to: iso(NOW) },
    RANK_DAY,
    SOLO_DAY,
    { from: '2026-11-21T22:00:00.000Z', to: '2026-11-22T03:00:00.000Z' },
    { from: '2026-10-01T00:00:00.000Z', to: '2026-10-02T00:00:00.000Z' },
  ]
  const filters: Record<string, string>[] = [
    {},
    { organizationName: 'Acme' },
    { provider: 'OPENAI' },
    { agent: 'planner' },
    { toolId: 'search' },
    { subscriberId: 'u1' },
    { environment: 'prod', productName: 'Gold' },
    { model: 'gpt-4o' },
    { agent: 'nobody' },
  ]
  const options: Record<string, Record<string, string>[]> = {
    'agents/cost': [{}, { sort: 'tokens', order: 'asc' }, { sort: 'agent' }, { sort: 'toolEvents' }],
    'tools/cost-over-time': [{}, { interval: 'day' }, { interval: 'minute' }],
    'traces/cost-distribution': [{}, { threshold: '0.01', buckets: '5' }, { threshold: '0.1', buckets: '100' }, { buckets: '1' }, { threshold: '5000' }],
    traces: [{}, { sort: 'time' }, { sort: 'time', order: 'asc' }, { order: 'asc', size: '7', page: '2' }, { minCost: '0.05' }, { minCost: '9000' }],
    providers: [{}],
    models: [{}],
    summary: [{}],
  }
  // Every option over every range, and over every filter (within two ranges).
  const cases: [Record<string, string>, Record<string, string>][] = [
    ...ranges.map((r): [Record<string, string>, Record<string, string>] => [r, {}]),
    ...filters.slice(1).flatMap((f): [Record<string, string>, Record<string, string>][] => [
      [ranges[0], f],
      [ranges[3], f],
    ]),
  ]
  const requests: string[] = []
  for (const [path, opts] of Object.entries(options))
    for (const [range, filter] of cases)
      for (const opt of opts) {
          // Minute buckets only over ranges up to a day (max_buckets).
        if (opt.interval === 'minute' && (range.from === undefined || Date.parse(range.to) - Date.parse(range.from) > DAY)) continue
        requests.push(`${path}?${new URLSearchParams({ ...range, ...filter, ...opt })}`)
      }
  for (const trace of ['solo', 'span', 'rank-3', 't-5', 't-44', 'whale', 'missing'])
    for (const q of [{}, { from: '2026-11-22T00:00:00.000Z', to: iso(NOW) }, { agent: 'planner' }]) requests.push(`traces/${trace}?${new URLSearchParams(q)}`)

  let same = 0
  let nonEmpty = 0
  const compare = async (path: string) => {
    const [a, b] = await Promise.all([call(`${embedded.url}${ANALYTICS}/${path}`, { key }), call(`${fromClickHouse.url}${ANALYTICS}/${path}`, { key: chKey })])
    // An error's doc_url names the daemon that answered: compare the rest of the bytes.
    a.text = a.text.replaceAll(embedded.url, '<origin>')
    b.text = b.text.replaceAll(fromClickHouse.url, '<origin>')
    if (a.status !== b.status || a.text !== b.text) {
      t.same({ status: b.status, body: b.body }, { status: a.status, body: a.body }, `${path}: ClickHouse answers as the embedded index`)
      return
    }
    same++
    if (a.status === 200 && /"[1-9]\d*\.\d+"|"0\.\d*[1-9]/.test(a.text)) nonEmpty++
  }
  // A few at a time: ClickHouse answers queries side by side.
  for (let i = 0; i < requests.length; i += 4) await Promise.all(requests.slice(i, i + 4).map(compare))
  t.equal(same, requests.length, `${requests.length} answers identical`)
  t.ok(nonEmpty > requests.length / 2, `most answers carry money (${nonEmpty} of ${requests.length}): the comparison is not of empty answers`)
})
