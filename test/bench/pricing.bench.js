/**
 * Pricing benchmark (issue 3): ingest throughput with the pricing processor on vs off, in the
 * same run, each in its own `meterd run` child process, driven by autocannon on 127.0.0.1.
 * Completions are priced from the book (cached and reasoning tokens, a dated model name);
 * tool events are priced from a registered tool with graduated tiers (one aggregate update,
 * in the same LMDB transaction as the record, per event). Runs alternate off/on three times and
 * compare each side's median, so a noisy neighbour hurts both alike.
 * Target: with pricing ≥ 0.9 × without, for completions and for tool events.
 * Run: `npm run bench -- pricing` (BENCH_SECONDS=n changes the length of each measured run).
 */
import { BENCH_SECONDS, bodyTemplate, cannon, cpuSeconds, fmt, freshTransactions, header, line, median, missed, ratioLine, spawnMeterd, stealMeter, summarize } from './lib.js'

const CONNECTIONS = 32

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
    pipelines: { usage: { receivers: ['metering'], processors, exporters: ['lmdb'] } },
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
  await cannon({ url: d.url, requests: requests(d.key, path, body), duration: 1 }) // warm-up
  const cpu0 = cpuSeconds(d.pid)
  const s = summarize(await cannon({ url: d.url, connections: CONNECTIONS, requests: requests(d.key, path, body) }))
  s.cpuUs = ((cpuSeconds(d.pid) - cpu0) / s.total) * 1e6
  return s
}

const ROUNDS = 3
header(`pricing: ingest with vs without the pricing processor, ${CONNECTIONS} connections, ${ROUNDS} alternating rounds of ${BENCH_SECONDS} s per side`)
const off = await start(['validate', 'attribution'])
const on = await start(['validate', 'attribution', 'pricing'])
// Per kind and side, every round's req/s and CPU per request (all of the daemon's threads;
// far less sensitive than req/s to the load generator and to neighbours on a shared machine).
const runs = { completion: { off: [], on: [] }, tool: { off: [], on: [] } }
let non2xx = 0
try {
  const steal = stealMeter()
  for (let round = 0; round < ROUNDS; round++) {
    for (const [kind, path, body] of [['completion', '/meter/v2/ai/completions', COMPLETION], ['tool', '/meter/v2/tool/events', TOOL_EVENT]]) {
      for (const [side, d] of [['off', off], ['on', on]]) {
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
  for (const [kind, label] of [['completion', 'completions'], ['tool', 'tool events']]) {
    line(label, `${fmt(rps(kind, 'on'))} req/s with pricing vs ${fmt(rps(kind, 'off'))} req/s without (medians; rounds ${runs[kind].on.map((s) => fmt(s.rps)).join('/')} vs ${runs[kind].off.map((s) => fmt(s.rps)).join('/')})`)
    process.stdout.write(ratioLine(`${label} ratio`, rps(kind, 'on'), rps(kind, 'off'), 0.9) + '\n')
    line(`${label} CPU/request`, `${fmt(cpu(kind, 'on'))} µs with pricing vs ${fmt(cpu(kind, 'off'))} µs without (ratio without/with ${fmt(cpu(kind, 'off') / cpu(kind, 'on'), 2)})`)
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
