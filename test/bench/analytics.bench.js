/**
 * Analytics benchmark (issue 17). Seeds RECORDS usage records (default 1,000,000) in TRACES
 * traces (a tenth of them) over 30 days straight into a fresh LMDB data directory, then:
 *
 * 1. Start-up: a `meterd run` child on that directory; the time until the analytics endpoints
 *    answer (the exporter reads every stored record back), and the memory it takes: the anonymous
 *    RSS of the daemon beside that of a daemon without the analytics exporter on the same data,
 *    and the exporter's own count of column bytes (/metrics meterd_analytics_bytes).
 * 2. Queries: every analytics endpoint over the whole period, REPS times each (after warm-up),
 *    p50/p95 of the HTTP answer time; target p95 ≤ 250 ms. Beside each, the baseline: a plain
 *    in-process scan computing the same answer (a child process holding every record as the
 *    object the store returns, summing exact money with BigInt, grouping with Maps, sorting for
 *    percentiles), p50/p95 of BASELINE_REPS runs. The answers of both are compared.
 * 3. Ingest: completions per second with the analytics exporter in the pipeline and without,
 *    in PAIRS short paired runs (as the pricing bench does); target with/without ≥ 0.9.
 *
 * Run: `npm run bench -- analytics`. BENCH_ANALYTICS_RECORDS=n seeds n records instead;
 * BENCH_PAIRS / BENCH_PAIR_SECONDS change the ingest pairs.
 */
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { bodyTemplate, cannon, check, cpuSeconds, fmt, freshTransactions, header, line, median, missed, PACKAGE_ROOT, ratioLine, rssParts, spawnMeterd, stealMeter, summarize } from './lib.js'

const RECORDS = Math.max(1000, Number(process.env.BENCH_ANALYTICS_RECORDS) || 1_000_000)
const TRACES = Math.max(1, Math.floor(RECORDS / 10))
const T0 = Date.parse('2026-10-01T00:00:00.000Z')
const SPAN = 30 * 86_400_000
const TEAM = 'default' // the team of the bootstrap key (BENCH_KEY)
const REPS = 30
const BASELINE_REPS = 5
const TARGET_MS = 250
const PAIRS = Math.max(1, Number(process.env.BENCH_PAIRS) || 8)
const PAIR_SECONDS = Math.max(1, Number(process.env.BENCH_PAIR_SECONDS) || 2)
const THRESHOLD = '0.01'

const whole = { from: new Date(T0).toISOString(), to: new Date(T0 + SPAN).toISOString() }
/** The queries, over the whole period: [label, path, query]. */
const QUERIES = [
  ['agents/cost', 'agents/cost', {}],
  ['tools/cost-over-time hour', 'tools/cost-over-time', { interval: 'hour' }],
  ['traces/cost-distribution', 'traces/cost-distribution', { threshold: THRESHOLD }],
  ['traces sort=cost', 'traces', { sort: 'cost' }],
  ['traces sort=time', 'traces', { sort: 'time' }],
  ['providers', 'providers', {}],
  ['models', 'models', {}],
  ['summary', 'summary', {}],
  ['agents/cost agent=agent-3', 'agents/cost', { agent: 'agent-3' }],
]

const AGENTS = Array.from({ length: 20 }, (_, i) => `agent-${i}`)
const TOOLS = Array.from({ length: 10 }, (_, i) => `tool-${i}`)
const MODELS = [['OpenAI', 'gpt-4o-mini'], ['OpenAI', 'gpt-4o'], ['Anthropic', 'claude-sonnet-4-5'], ['Anthropic', 'claude-haiku-4-5'], ['Google', 'gemini-2.5-flash'], ['Google', 'gemini-2.5-pro']]

/** A small deterministic generator (mulberry32). */
function prng(seed) {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** Units of 10^-12 USD as a plain decimal. */
function usd(units) {
  const s = String(units).padStart(13, '0')
  const out = `${s.slice(0, -12)}.${s.slice(-12)}`.replace(/\.?0+$/, '')
  return out === '' ? '0' : out
}

/** Writes the records straight into the store (as the lmdb exporter would), in time order. */
async function seedStore(dir) {
  const { Store } = await import(join(PACKAGE_ROOT, 'dist/src/store/store.js'))
  const { newId } = await import(join(PACKAGE_ROOT, 'dist/src/core/ids.js'))
  const store = new Store({ path: dir })
  const rnd = prng(7)
  const pick = (xs) => xs[Math.floor(rnd() * xs.length)]
  let batch = []
  let written = 0
  const flush = async () => {
    const items = batch
    batch = []
    await store.root.transaction(() => store.usage.writeInTransaction(items, { dedupWindowMs: 0, now: T0 }))
  }
  for (let k = 0; k < TRACES && written < RECORDS; k++) {
    const start = T0 + Math.floor(((k + rnd()) / TRACES) * SPAN)
    const n = k === TRACES - 1 ? RECORDS - written : Math.min(RECORDS - written, 1 + Math.floor(rnd() * 19))
    const agent = rnd() < 0.9 ? pick(AGENTS) : ''
    const org = `org-${Math.floor(rnd() * 50)}`
    const product = pick(['Gold', 'Silver', 'Bronze'])
    const subscriber = `user-${Math.floor(rnd() * 2000)}`
    const environment = rnd() < 0.8 ? 'prod' : 'staging'
    for (let j = 0; j < n; j++) {
      const t = start + j * 2000
      const time = new Date(t).toISOString()
      const tool = rnd() < 0.3
      const id = newId(t)
      const attribution = { organizationName: org, productName: product, subscriberId: subscriber, subscriberEmail: '', subscriberCredentialName: 'key', agent: tool && rnd() < 0.2 ? '' : agent, traceId: `trace-${k}`, workflowId: '', taskType: 'chat', subscriptionId: '', ticketId: '', environment, region: 'eu' }
      const caller = { account: 'bench', tenant: 'bench', team: TEAM, environment: 'prod', keyId: 'k' }
      let r
      if (tool) {
        const units = 1_000_000_000 * (1 + Math.floor(rnd() * 10))
        r = {
          id, kind: 'tool', eventTime: time, receivedAt: time, caller, attribution, attributed: true,
          cost: { currency: 'USD', total: usd(units), parts: {}, source: 'registry', priceVersion: 'r1', quantities: { calls: '1' } },
          body: { toolId: pick(TOOLS), timestamp: time, operation: 'call', durationMs: Math.floor(rnd() * 800), success: rnd() > 0.05, traceId: `trace-${k}`, agent, organizationName: org, productName: product },
        }
      } else {
        const [provider, model] = pick(MODELS)
        const input = Math.floor(rnd() * 4000)
        const output = Math.floor(rnd() * 800)
        const duration = 200 + Math.floor(rnd() * 6000)
        const units = input * 150_000 + output * 600_000
        r = {
          id, kind: 'completion', eventTime: time, receivedAt: time, caller, attribution, attributed: true,
          cost: { currency: 'USD', total: usd(units), parts: { input: usd(input * 150_000), output: usd(output * 600_000) }, source: 'pricebook', priceVersion: 'p1' },
          body: {
            model, provider, inputTokenCount: input, outputTokenCount: output, totalTokenCount: input + output, reasoningTokenCount: 0, cacheReadTokenCount: Math.floor(input / 3), cacheCreationTokenCount: 0,
            stopReason: rnd() < 0.03 ? 'ERROR' : 'END', requestTime: time, completionStartTime: new Date(t + 150).toISOString(), responseTime: new Date(t + duration).toISOString(),
            requestDuration: duration, timeToFirstToken: 100 + Math.floor(rnd() * 900), isStreamed: true, costType: 'AI', traceId: `trace-${k}`, agent, organizationName: org, productName: product,
            subscriber: { id: subscriber, credential: { name: 'key', value: 'x' } }, middlewareSource: 'bench',
          },
        }
      }
      batch.push(r)
      written++
      if (batch.length === 10_000) await flush()
    }
  }
  if (batch.length) await flush()
  await store.close()
  return written
}

// ---------------------------------------------------------------------------------------------
// The baseline: every record in memory as the store returns it, each answer computed plainly.

async function baselineMain(dir) {
  const { Store } = await import(join(PACKAGE_ROOT, 'dist/src/store/store.js'))
  const { unitsOfMoney, moneyOfUnits } = await import(join(PACKAGE_ROOT, 'dist/src/domain/pricing/money.js'))
  const store = new Store({ path: dir })
  const records = []
  for (const { key, value } of store.usage.records.getRange({})) if (typeof key === 'string') records.push(value)
  await store.close()
  const from = T0
  const to = T0 + SPAN
  const inRange = (r) => {
    const t = Date.parse(r.eventTime)
    return t >= from && t < to && r.caller.team === TEAM
  }
  const cost = (r) => unitsOfMoney(r.cost.total)
  const rank = (sorted, p) => (sorted.length ? sorted[Math.max(1, Math.ceil((p * sorted.length) / 100)) - 1] : null)
  const numSort = (a, b) => a - b
  const bigSort = (a, b) => (a < b ? -1 : a > b ? 1 : 0)
  const traceMap = (withDetail) => {
    const m = new Map()
    for (const r of records) {
      if (!inRange(r) || !r.attribution.traceId) continue
      let x = m.get(r.attribution.traceId)
      if (!x) m.set(r.attribution.traceId, (x = { id: r.attribution.traceId, cost: 0n, start: Infinity, agents: new Set() }))
      x.cost += cost(r)
      if (withDetail) {
        x.start = Math.min(x.start, Date.parse(r.eventTime))
        if (r.attribution.agent) x.agents.add(r.attribution.agent)
      }
    }
    return m
  }
  const providers = (by) => {
    const m = new Map()
    for (const r of records) {
      if (!inRange(r) || r.kind !== 'completion') continue
      const p = r.body.provider.toLowerCase()
      const k = by === 'provider' ? p : `${p}/${r.body.model}`
      let x = m.get(k)
      if (!x) m.set(k, (x = { cost: 0n, requests: 0, errors: 0, tokens: 0, latency: [], ttft: [] }))
      x.cost += cost(r)
      x.requests++
      if (r.body.stopReason === 'ERROR') x.errors++
      x.tokens += r.body.totalTokenCount ?? 0
      x.latency.push(r.body.requestDuration)
      if (r.body.timeToFirstToken > 0) x.ttft.push(r.body.timeToFirstToken)
    }
    const out = {}
    for (const [k, x] of m) {
      x.latency.sort(numSort)
      x.ttft.sort(numSort)
      out[k] = { cost: moneyOfUnits(x.cost), requests: x.requests, latency: [rank(x.latency, 50), rank(x.latency, 95)], ttft: [rank(x.ttft, 50), rank(x.ttft, 95)] }
    }
    return out
  }
  const agentsAnswer = (onlyAgent) => {
    const m = new Map()
    for (const r of records) {
      if (!inRange(r) || (onlyAgent && r.attribution.agent !== onlyAgent)) continue
      const k = r.attribution.agent || null
      let x = m.get(k)
      if (!x) m.set(k, (x = { token: 0n, tool: 0n, completions: 0, toolEvents: 0, tokens: 0 }))
      if (r.kind === 'tool') (x.tool += cost(r)), x.toolEvents++
      else (x.token += cost(r)), x.completions++, (x.tokens += r.body.totalTokenCount ?? 0)
    }
    return Object.fromEntries([...m].map(([k, x]) => [String(k), moneyOfUnits(x.token + x.tool)]))
  }
  const answers = {
    'agents/cost': () => agentsAnswer(),
    'agents/cost agent=agent-3': () => agentsAnswer('agent-3'),
    'tools/cost-over-time hour': () => {
      const m = new Map()
      for (const r of records) {
        if (!inRange(r) || r.kind !== 'tool') continue
        const b = Math.floor((Date.parse(r.eventTime) - from) / 3_600_000)
        let x = m.get(r.body.toolId)
        if (!x) m.set(r.body.toolId, (x = Array.from({ length: SPAN / 3_600_000 }, () => ({ cost: 0n, events: 0 }))))
        x[b].cost += cost(r)
        x[b].events++
      }
      return Object.fromEntries([...m].map(([k, x]) => [k, moneyOfUnits(x.reduce((s, b) => s + b.cost, 0n))]))
    },
    'traces/cost-distribution': () => {
      const costs = [...traceMap(false).values()].map((x) => x.cost).sort(bigSort)
      const threshold = unitsOfMoney(THRESHOLD)
      const m = (v) => (v === null ? null : moneyOfUnits(v))
      return { count: costs.length, min: m(costs[0] ?? null), max: m(costs[costs.length - 1] ?? null), p50: m(rank(costs, 50)), p90: m(rank(costs, 90)), p95: m(rank(costs, 95)), p99: m(rank(costs, 99)), above: costs.filter((c) => c > threshold).length }
    },
    'traces sort=cost': () => [...traceMap(true).values()].sort((a, b) => (a.cost === b.cost ? (a.id < b.id ? -1 : 1) : a.cost > b.cost ? -1 : 1)).slice(0, 20).map((x) => `${x.id} ${moneyOfUnits(x.cost)}`),
    'traces sort=time': () => [...traceMap(true).values()].sort((a, b) => b.start - a.start || (a.id < b.id ? -1 : 1)).slice(0, 20).map((x) => `${x.id} ${moneyOfUnits(x.cost)}`),
    providers: () => providers('provider'),
    models: () => providers('model'),
    summary: () => {
      let c = 0n
      let n = 0
      for (const r of records) if (inRange(r)) (c += cost(r)), n++
      return { cost: moneyOfUnits(c), records: n }
    },
  }
  const out = {}
  for (const [label] of QUERIES) {
    const times = []
    let answer
    for (let i = 0; i < BASELINE_REPS; i++) {
      const s = performance.now()
      answer = answers[label]()
      times.push(performance.now() - s)
    }
    out[label] = { times, answer }
  }
  process.stdout.write(JSON.stringify(out))
}

/** The daemon's answer in the baseline's terms, for the comparison. */
function comparable(label, body) {
  switch (label) {
    case 'agents/cost':
    case 'agents/cost agent=agent-3':
      return Object.fromEntries(body.agents.map((a) => [String(a.agent), a.totalCost]))
    case 'tools/cost-over-time hour':
      return Object.fromEntries(body.tools.map((t) => [t.toolId, t.cost]))
    case 'traces/cost-distribution':
      return { count: body.count, min: body.min, max: body.max, ...body.percentiles, above: body.above.count }
    case 'traces sort=cost':
    case 'traces sort=time':
      return body.traces.map((t) => `${t.traceId} ${t.cost}`)
    case 'providers':
    case 'models':
      return Object.fromEntries(
        body[label].map((p) => [label === 'providers' ? p.provider : `${p.provider}/${p.model}`, { cost: p.cost, requests: p.requests, latency: [p.latencyMs.p50, p.latencyMs.p95], ttft: [p.timeToFirstTokenMs.p50, p.timeToFirstTokenMs.p95] }]),
      )
    case 'summary':
      return { cost: body.period.cost, records: body.period.records }
  }
}

const sortKeys = (v) => (Array.isArray(v) ? v.map(sortKeys) : v && typeof v === 'object' ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sortKeys(v[k])])) : v)
const same = (a, b) => JSON.stringify(sortKeys(a)) === JSON.stringify(sortKeys(b))
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.max(1, Math.ceil((p * s.length) / 100)) - 1]
}

async function runBaseline(dir) {
  const child = spawn(process.execPath, ['--max-old-space-size=12288', fileURLToPath(import.meta.url), '--baseline', dir], { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  child.stdout.on('data', (d) => (out += d))
  const code = await new Promise((resolve) => child.on('exit', resolve))
  if (code !== 0) throw new Error(`baseline exited ${code}`)
  return JSON.parse(out)
}

async function getJson(d, path, query) {
  const qs = new URLSearchParams({ ...whole, ...query }).toString()
  const res = await fetch(`${d.url}/profitstream/v2/api/analytics/${path}?${qs}`, { headers: { 'x-api-key': d.key } })
  return { status: res.status, body: await res.json() }
}

async function metric(d, name) {
  const text = await (await fetch(`${d.url}/metrics`)).text()
  const m = new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm').exec(text)
  return m ? Number(m[1]) : NaN
}

// Not the rate limits: they are another bench's subject, and the query loop would meet them.
const NO_LIMITS = (exporters) => ({
  service: {
    extensions: ['apikeys', 'tools'],
    pipelines: { usage: { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'], exporters } },
  },
})

async function main() {
  header(`analytics: ${RECORDS.toLocaleString('en')} records in ${TRACES.toLocaleString('en')} traces over 30 days; each query over the whole period`)
  const dir = mkdtempSync(join(tmpdir(), 'meterd-bench-analytics-'))
  const dataDir = join(dir, 'data')
  try {
    let started = Date.now()
    const written = await seedStore(dataDir)
    line('seeded', `${written.toLocaleString('en')} records written to LMDB in ${fmt((Date.now() - started) / 1000, 1)} s`)

    // 1. Start-up and memory.
    started = Date.now()
    const d = await spawnMeterd({ config: NO_LIMITS(['lmdb', 'analytics']), env: { METERD_DATA_DIR: dataDir } })
    const listening = Date.now() - started
    for (;;) {
      const r = await fetch(`${d.url}/profitstream/v2/api/analytics/summary`, { headers: { 'x-api-key': d.key } })
      await r.arrayBuffer()
      if (r.status === 200) break
      if (r.status !== 503) throw new Error(`summary answered ${r.status}`)
      await new Promise((r) => setTimeout(r, 20))
    }
    const rebuilt = Date.now() - started
    line('start-up', `listening after ${fmt(listening / 1000, 1)} s (ingest is served from then on); analytics ready after ${fmt(rebuilt / 1000, 1)} s (${fmt(written / (rebuilt / 1000))} records/s read back)`)
    try {
      // 2. Queries, each beside the baseline.
      const results = []
      for (const [label, path, query] of QUERIES) {
        let body
        for (let i = 0; i < 3; i++) body = (await getJson(d, path, query)).body
        const times = []
        for (let i = 0; i < REPS; i++) {
          const s = performance.now()
          const res = await getJson(d, path, query)
          times.push(performance.now() - s)
          if (res.status !== 200) throw new Error(`${label}: ${res.status} ${JSON.stringify(res.body)}`)
        }
        results.push({ label, times, body })
      }
      const columns = await metric(d, 'meterd_analytics_bytes')
      const rows = await metric(d, 'meterd_analytics_rows')
      await new Promise((r) => setTimeout(r, 3000)) // let the daemon's heap settle
      const withAnalytics = rssParts(d.pid)
      // After the daemon's runs, not beside them: the two would share this machine's cores.
      const base = await runBaseline(dataDir)
      process.stdout.write('\n')
      line('query (whole period)', `meterd p50 / p95 (${REPS} runs, HTTP included) | plain scan p50 / p95 (${BASELINE_REPS} runs, in process) | scan / meterd at p50`)
      let agree = true
      for (const r of results) {
        const b = base[r.label]
        const p50 = pct(r.times, 50)
        const p95 = pct(r.times, 95)
        const ok = same(comparable(r.label, r.body), b.answer)
        if (!ok) {
          agree = false
          line(`  ${r.label} answers differ`, JSON.stringify({ meterd: comparable(r.label, r.body), scan: b.answer }).slice(0, 400))
        }
        line(`  ${r.label}`, `${fmt(p50, 1)} / ${fmt(p95, 1)} ms | ${fmt(pct(b.times, 50))} / ${fmt(pct(b.times, 95))} ms | ${fmt(pct(b.times, 50) / p50, 1)}× ${check(`${r.label} p95 ≤ ${TARGET_MS} ms`, p95 <= TARGET_MS)}${ok ? '' : ' (answer differs)'}`)
      }
      line('answers meterd = plain scan', check('answers agree with the plain scan', agree))
      line('rows held', `${rows.toLocaleString('en')} (every stored record)`)
      line('memory: analytics columns', `${fmt(columns / 1048576, 1)} MiB, ${fmt(columns / rows, 1)} bytes per record (meterd_analytics_bytes)`)
      await d.stop()
      // The same data without the analytics exporter: the difference is what analytics holds in all.
      const plain = await spawnMeterd({ config: NO_LIMITS(['lmdb']), env: { METERD_DATA_DIR: dataDir } })
      await new Promise((r) => setTimeout(r, 3000))
      const without = rssParts(plain.pid)
      await plain.stop()
      line('memory: anonymous RSS', `${fmt(withAnalytics.anon, 1)} MiB with analytics, ${fmt(without.anon, 1)} MiB without: ${fmt(((withAnalytics.anon - without.anon) * 1048576) / written, 0)} bytes per record in all (columns, dictionaries, traceIds, heap)`)
    } finally {
      await d.stop()
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }

  // 3. Ingest with and without the exporter.
  process.stdout.write('\n')
  const template = bodyTemplate()
  const requests = (key) => [{ method: 'POST', path: '/meter/v2/ai/completions', headers: { 'content-type': 'application/json', 'x-api-key': key }, setupRequest: freshTransactions(template) }]
  const off = await spawnMeterd({ config: NO_LIMITS(['lmdb']) })
  const on = await spawnMeterd({ config: NO_LIMITS(['lmdb', 'analytics']) })
  try {
    let acked = 0 // the "on" side's 201s, each of which analytics must count once
    for (const s of [off, on]) {
      const warm = summarize(await cannon({ url: s.url, requests: requests(s.key), duration: 2 }))
      if (s === on) acked += warm.ok
    }
    const runs = { off: [], on: [] }
    let bad = 0
    const steal = stealMeter()
    for (let pair = 0; pair < PAIRS; pair++) {
      const order = pair % 2 === 0 ? [['off', off], ['on', on]] : [['on', on], ['off', off]]
      for (const [side, s] of order) {
        const cpu0 = cpuSeconds(s.pid)
        const r = summarize(await cannon({ url: s.url, connections: 32, duration: PAIR_SECONDS, requests: requests(s.key) }))
        r.cpuUs = ((cpuSeconds(s.pid) - cpu0) / r.total) * 1e6
        bad += r.non2xx + r.errors
        if (side === 'on') acked += r.ok
        runs[side].push(r)
      }
    }
    const ratios = runs.on.map((r, i) => r.rps / runs.off[i].rps)
    line('ingest', `${fmt(median(runs.on.map((r) => r.rps)))} req/s with analytics vs ${fmt(median(runs.off.map((r) => r.rps)))} req/s without (medians of ${PAIRS} runs of ${PAIR_SECONDS} s)`)
    line('ingest pair ratios', ratios.map((r) => fmt(r, 2)).join(' '))
    process.stdout.write(ratioLine('ingest ratio on/off (median pair)', median(ratios), 1, 0.9) + '\n')
    line('CPU/request', `${fmt(median(runs.on.map((r) => r.cpuUs)))} µs with analytics vs ${fmt(median(runs.off.map((r) => r.cpuUs)))} µs without`)
    line('CPU steal during the pairs', `${fmt(steal(), 1)}%`)
    const counted = await getJson(on, 'summary', { from: '2026-11-21T00:00:00Z', to: '2026-11-22T00:00:00Z' })
    // autocannon does not count the answers still in flight when a run ends; the store has those records too.
    const stored = await fetch(`${on.url}/profitstream/v2/api/sources/metrics/ai/completions?from=2026-11-21T00:00:00Z&to=2026-11-22T00:00:00Z&size=1`, { headers: { 'x-api-key': on.key } }).then((r) => r.json())
    const n = counted.body.period.records
    line('records counted by analytics', `${n}; the store holds ${stored.page.totalElements}, ${acked} 201s were counted by autocannon ${check('analytics counts every stored record once', n === stored.page.totalElements && n >= acked)}`)
    line('non-2xx or errors', String(bad))
  } finally {
    await off.stop()
    await on.stop()
  }
  const misses = missed()
  line('analytics targets', misses.length ? `missed: ${misses.join(', ')}` : 'all met')
}

if (process.argv[2] === '--baseline') await baselineMain(process.argv[3])
else await main()
