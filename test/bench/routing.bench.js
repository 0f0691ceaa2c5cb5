/**
 * Routing benchmark (issue 18): ingest through a 10-route routing connector and an attributes
 * processor of 5 actions vs the default pipeline, in the same run, each in its own `meterd run`
 * child process, driven by autocannon on 127.0.0.1. Every record meets only the last route, so
 * all ten conditions are evaluated per record; the five actions all change it (delete, hash,
 * insert, truncate, set).
 *
 * Measured as pricing.bench.js is: PAIRS short paired runs (default then routed, then routed then
 * default, …), the ratio is the median of the pairs' ratios. Target: routed ≥ 0.95 × default.
 * Also printed: the cost of one compiled condition (ns per evaluation, in this process, on the
 * compiled dist/ build), beside an empty function call measured the same way.
 * Run: `npm run bench -- routing` (BENCH_PAIRS=n and BENCH_PAIR_SECONDS=n change the pairs).
 */
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { PACKAGE_ROOT, bodyTemplate, cannon, cpuSeconds, fmt, freshTransactions, header, line, median, missed, ratioLine, spawnMeterd, stealMeter, summarize, LITELLM_COMPLETION } from './lib.js'

const CONNECTIONS = 32
const PAIRS = Math.max(1, Number(process.env.BENCH_PAIRS) || 8)
const PAIR_SECONDS = Math.max(1, Number(process.env.BENCH_PAIR_SECONDS) || 2)
const PATH = '/meter/v2/ai/completions'
const BODY = bodyTemplate({ ...LITELLM_COMPLETION, inputMessages: '[{"role":"user","content":"' + 'x'.repeat(400) + '"}]', region: undefined })

// Nine routes the record does not meet, of every kind of test, then the one it meets.
const TABLE = [
  'organizationName == "Org1"',
  'environment in ["test", "dev", "staging"]',
  'provider == "anthropic" and model =~ "^claude-3"',
  'cost.total > 1000',
  'inputTokenCount > 100000',
  'kind == "tool" and toolId exists',
  'not productName exists',
  'attributes.tier == "gold" or agent == "batch-runner"',
  'subscriber.email =~ "@internal\\\\.example$"',
  'organizationName == "AcmeOrg" and cost.total >= 0',
].map((condition, i) => ({ condition, pipelines: [i === 9 ? 'usage/main' : 'usage/other'] }))

const ACTIONS = [
  { key: 'inputMessages', action: 'delete' },
  { key: 'subscriber.email', action: 'hash' },
  { key: 'region', value: 'eu-west-1', action: 'insert' },
  { key: 'traceId', action: 'truncate', length: 4 },
  { key: 'attributes.routed', value: true, action: 'set' },
]

const USAGE = { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'] }
const DEFAULT = { service: { extensions: ['apikeys'], pipelines: { usage: { ...USAGE, exporters: ['lmdb'] } } } }
const ROUTED = {
  connectors: { routing: { table: TABLE } },
  processors: { 'attributes/bench': { actions: ACTIONS } },
  service: {
    extensions: ['apikeys'],
    pipelines: {
      usage: { ...USAGE, exporters: ['routing'] },
      'usage/main': { receivers: ['routing'], processors: ['attributes/bench'], exporters: ['lmdb'] },
      'usage/other': { receivers: ['routing'], exporters: ['lmdb'] },
    },
  },
}

const requests = (key) => [{ method: 'POST', path: PATH, headers: { 'content-type': 'application/json', 'x-api-key': key }, setupRequest: freshTransactions(BODY) }]

async function measure(d) {
  const cpu0 = cpuSeconds(d.pid)
  const s = summarize(await cannon({ url: d.url, connections: CONNECTIONS, duration: PAIR_SECONDS, requests: requests(d.key) }))
  s.cpuUs = ((cpuSeconds(d.pid) - cpu0) / s.total) * 1e6
  return s
}

/** ns per call of fn over a record, best of 5 runs of n calls. */
function nsPerCall(fn, record, n = 2_000_000) {
  let best = Infinity
  let sink = 0
  for (let run = 0; run < 5; run++) {
    const t0 = process.hrtime.bigint()
    for (let i = 0; i < n; i++) if (fn(record)) sink++
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / n)
  }
  if (sink < 0) throw new Error('unreachable')
  return best
}

header(`routing: ingest through a 10-route table and 5 attribute actions vs the default pipeline, ${CONNECTIONS} connections, ${PAIRS} paired runs of ${PAIR_SECONDS} s`)

// One compiled condition, in this process.
const { compileCondition, usageFields } = await import(pathToFileURL(join(PACKAGE_ROOT, 'dist', 'src', 'domain', 'conditions', 'index.js')).href)
const record = {
  id: 'r', kind: 'completion', eventTime: '', receivedAt: '', attributed: true,
  caller: { account: 'a', tenant: 't', team: 'team-a', environment: 'prod', keyId: 'k' },
  attribution: { organizationName: 'AcmeOrg', productName: 'Gold', subscriberId: '', subscriberEmail: '', subscriberCredentialName: '', agent: '', traceId: '', workflowId: '', taskType: '', subscriptionId: '', ticketId: '', environment: 'prod', region: '' },
  cost: { currency: 'USD', total: '0.000004800000', parts: {}, source: 'pricebook' },
  body: { ...LITELLM_COMPLETION },
}
const empty = () => true
const baseNs = nsPerCall(empty, record)
for (const src of ['organizationName == "AcmeOrg"', 'environment in ["test", "dev"]', 'cost.total > 0', TABLE[9].condition]) {
  const p = compileCondition(src, usageFields)
  line(`condition: ${src}`, `${fmt(nsPerCall(p, record), 1)} ns per evaluation (an empty function call: ${fmt(baseNs, 1)} ns)`)
}

// OTLP listeners on free ports: other daemons on this machine may hold 4317 and 4318.
const env = { METERD_OTLP_GRPC_ENDPOINT: '127.0.0.1:0', METERD_OTLP_HTTP_ENDPOINT: '127.0.0.1:0' }
const plain = await spawnMeterd({ config: DEFAULT, env })
const routed = await spawnMeterd({ config: ROUTED, env })
const runs = { plain: [], routed: [] }
let non2xx = 0
try {
  const steal = stealMeter()
  for (const d of [plain, routed]) await cannon({ url: d.url, requests: requests(d.key), duration: 2 }) // warm-up
  for (let pair = 0; pair < PAIRS; pair++) {
    const order = pair % 2 === 0 ? [['plain', plain], ['routed', routed]] : [['routed', routed], ['plain', plain]]
    for (const [side, d] of order) {
      const s = await measure(d)
      non2xx += s.non2xx + s.errors
      runs[side].push(s)
    }
  }
  const stealPct = steal()
  // The routed daemon really routed and redacted (the bench measures the real thing).
  const sample = await fetch(`${routed.url}/profitstream/v2/api/sources/metrics/ai/completions?size=1`, { headers: { 'x-api-key': routed.key } }).then((r) => r.json())
  const r = sample._embedded.aICompletionMetricResourceList[0]
  line('sample routed record', r ? `region ${r.region}, e-mail ${String(r.subscriber?.email).slice(0, 12)}…, inputMessages ${'inputMessages' in r ? 'KEPT' : 'deleted'}` : 'NONE')
  const ratios = runs.routed.map((s, i) => s.rps / runs.plain[i].rps)
  line('ingest', `${fmt(median(runs.routed.map((s) => s.rps)))} req/s routed vs ${fmt(median(runs.plain.map((s) => s.rps)))} req/s default (medians of ${PAIRS} runs each)`)
  line('pair ratios', ratios.map((x) => fmt(x, 2)).join(' '))
  process.stdout.write(ratioLine('routed / default (median pair)', median(ratios), 1, 0.95) + '\n')
  line('CPU/request', `${fmt(median(runs.routed.map((s) => s.cpuUs)))} µs routed vs ${fmt(median(runs.plain.map((s) => s.cpuUs)))} µs default`)
  line('CPU steal during the rounds', `${fmt(stealPct, 1)}%`)
  line('non-2xx or errors', String(non2xx))
} finally {
  await plain.stop()
  await routed.stop()
}
const misses = missed()
line('routing targets', misses.length ? `missed: ${misses.join(', ')}` : 'all met')
