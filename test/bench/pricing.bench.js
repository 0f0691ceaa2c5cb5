/**
 * Pricing benchmark (issue 3): ingest throughput with the pricing processor on vs off, in the
 * same run, each in its own `meterd run` child process, driven by autocannon on 127.0.0.1.
 * Completions are priced from the book (cached and reasoning tokens, a dated model name);
 * tool events are priced from a registered tool with graduated tiers (one aggregate update,
 * in the same LMDB transaction as the record, per event).
 *
 * Measured in PAIRS short paired runs per kind (off then on, then on then off, …, PAIR_SECONDS
 * each, both daemons warmed up first): the ratio is the median of the pairs' ratios. On a shared
 * VM the speed drifts by a quarter within seconds (steal); a pair's two runs are seconds apart,
 * so the drift mostly cancels within each pair, where three long rounds per side did not.
 * Target: with pricing ≥ 0.9 × without, for completions and for tool events.
 * Run: `npm run bench -- pricing` (BENCH_PAIRS=n and BENCH_PAIR_SECONDS=n change the pairs).
 */
import { bodyTemplate, cannon, cpuSeconds, fmt, freshTransactions, header, line, median, missed, ratioLine, spawnMeterd, stealMeter, summarize } from './lib.js'

const CONNECTIONS = 32
const PAIRS = Math.max(1, Number(process.env.BENCH_PAIRS) || 8)
const PAIR_SECONDS = Math.max(1, Number(process.env.BENCH_PAIR_SECONDS) || 2)

const COMPLETION = bodyTemplate({
  stopReason: 'END', costType: 'AI', isStreamed: false, operationType: 'CHAT',
  inputTokenCount: 1200, outputTokenCount: 300, reasoningTokenCount: 120, cacheCreationTokenCount: 0,
  cacheReadTokenCount: 800, totalTokenCount: 1500, model: 'gpt-4o-mini-2024-07-18', provider: 'OpenAI',
  transactionId: '@@TX@@', requestTime: '2026-11-21T23:55:47.661Z', completionStartTime: '2026-11-21T23:55:47.678Z',
  responseTime: '2026-11-21T23:55:47.678Z', requestDuration: 17, organizationName: 'AcmeOrg', productName: 'Gold',
  agent: 'agent-a', traceId: 'trace-1',
})
const TOOL_EVENT = bodyTemplate({
  toolId: 'bench-search', transactionId: '@@TX@@', operation: 'search', durationMs: 3, success: true,
  timestamp: '2026-11-21T23:59:06.103Z', organizationName: 'AcmeOrg', productName: 'Gold', usageMetadata: { results: 3 },
})

function requests(key, path, template) {
  return [{ method: 'POST', path, headers: { 'content-type': 'application/json', 'x-api-key': key }, setupRequest: freshTransactions(template) }]
}

const pipeline = (processors) => ({
  service: {
    extensions: ['apikeys', 'tools'],
    pipelines: { usage: { receivers: ['metering', 'genai'], processors, exporters: ['lmdb'] } },
  },
})

async function start(processors) {
  const d = await spawnMeterd({ config: pipeline(processors) })
  const res = await fetch(`${d.url}/profitstream/v2/api/tools`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': d.key },
    body: JSON.stringify({
      toolId: 'bench-search', name: 'Bench search', toolType: 'AI_SERVICE',
      pricing: { elements: [{ name: 'results', aggregationType: 'SUM', tiersMode: 'graduated', tiers: [{ upTo: 1000, unitPrice: 0.01 }, { upTo: null, unitPrice: '0.005' }] }] },
    }),
  })
  if (res.status !== 201) throw new Error(`tool create: ${res.status} ${await res.text()}`)
  return d
}

async function measure(d, path, body) {
  const cpu0 = cpuSeconds(d.pid)
  const s = summarize(await cannon({ url: d.url, connections: CONNECTIONS, duration: PAIR_SECONDS, requests: requests(d.key, path, body) }))
  s.cpuUs = ((cpuSeconds(d.pid) - cpu0) / s.total) * 1e6
  return s
}

header(`pricing: ingest with vs without the pricing processor, ${CONNECTIONS} connections, ${PAIRS} paired runs of ${PAIR_SECONDS} s per kind`)
const off = await start(['validate', 'attribution'])
const on = await start(['validate', 'attribution', 'pricing'])
// Per kind and side, every run's req/s and CPU per request (all of the daemon's threads;
// far less sensitive than req/s to the load generator and to neighbours on a shared machine).
const runs = { completion: { off: [], on: [] }, tool: { off: [], on: [] } }
let non2xx = 0
try {
  const steal = stealMeter()
  for (const [kind, path, body] of [['completion', '/meter/v2/ai/completions', COMPLETION], ['tool', '/meter/v2/tool/events', TOOL_EVENT]]) {
    for (const d of [off, on]) await cannon({ url: d.url, requests: requests(d.key, path, body), duration: 2 }) // warm-up
    for (let pair = 0; pair < PAIRS; pair++) {
      // Alternate which side goes first, so a trend within the pairs favours neither.
      const order = pair % 2 === 0 ? [['off', off], ['on', on]] : [['on', on], ['off', off]]
      for (const [side, d] of order) {
        const s = await measure(d, path, body)
        non2xx += s.non2xx + s.errors
        runs[kind][side].push(s)
      }
    }
  }
  const stealPct = steal()
  // A priced record really carries its cost (the bench measures the real thing, not a no-op).
  const check = await fetch(`${on.url}/profitstream/v2/api/sources/metrics/ai/completions?size=1`, { headers: { 'x-api-key': on.key } }).then((r) => r.json())
  const cost = check._embedded.aICompletionMetricResourceList[0]?.cost
  line('sample priced record', cost ? `${cost.source} ${cost.total} USD (${cost.priceVersion})` : 'NONE')
  const rps = (kind, side) => median(runs[kind][side].map((s) => s.rps))
  const cpu = (kind, side) => median(runs[kind][side].map((s) => s.cpuUs))
  // Each pair's ratio, on over off: the figure the target is checked on is their median.
  const pairRatios = (kind, k) => runs[kind].on.map((s, i) => s[k] / runs[kind].off[i][k])
  for (const [kind, label] of [['completion', 'completions'], ['tool', 'tool events']]) {
    const ratios = pairRatios(kind, 'rps')
    line(label, `${fmt(rps(kind, 'on'))} req/s with pricing vs ${fmt(rps(kind, 'off'))} req/s without (medians of ${PAIRS} runs each)`)
    line(`${label} pair ratios`, ratios.map((r) => fmt(r, 2)).join(' '))
    process.stdout.write(ratioLine(`${label} ratio (median pair)`, median(ratios), 1, 0.9) + '\n')
    const cpuRatio = median(runs[kind].off.map((s, i) => s.cpuUs / runs[kind].on[i].cpuUs))
    line(`${label} CPU/request`, `${fmt(cpu(kind, 'on'))} µs with pricing vs ${fmt(cpu(kind, 'off'))} µs without (median pair ratio without/with ${fmt(cpuRatio, 2)})`)
  }
  line('CPU steal during the rounds', `${fmt(stealPct, 1)}%`)
  line('non-2xx or errors', String(non2xx))
} finally {
  await off.stop()
  await on.stop()
}
const misses = missed()
// A missed target is a result, not a crash (test/bench/run.js): say which, like the other benches.
line('pricing targets', misses.length ? `missed: ${misses.join(', ')}` : 'all met')
