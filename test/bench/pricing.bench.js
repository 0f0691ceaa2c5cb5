/**
 * Pricing benchmark (issue 3): ingest throughput with the pricing processor on vs off, in the
 * same run, each in its own `meterd run` child process, driven by autocannon on 127.0.0.1.
 * Completions are priced from the book (cached and reasoning tokens, a dated model name);
 * tool events are priced from a registered tool with graduated tiers (one aggregate update,
 * in its own LMDB transaction, per event). Runs alternate off/on twice and keep each side's
 * best, so a noisy neighbour hurts both alike.
 * Target: completions with pricing ≥ 0.9 × without. Tool events are reported beside it.
 * Run: `npm run bench -- pricing` (BENCH_SECONDS=n changes the length of each measured run).
 */
import { BENCH_SECONDS, cannon, cpuSeconds, fmt, header, line, missed, ratioLine, spawnMeterd, summarize } from './lib.js'

const CONNECTIONS = 32
const run = `${process.pid.toString(36)}-${Date.now().toString(36)}`
let seq = 0

const COMPLETION = JSON.stringify({
  stopReason: 'END', costType: 'AI', isStreamed: false, operationType: 'CHAT',
  inputTokenCount: 1200, outputTokenCount: 300, reasoningTokenCount: 120, cacheCreationTokenCount: 0,
  cacheReadTokenCount: 800, totalTokenCount: 1500, model: 'gpt-4o-mini-2024-07-18', provider: 'OpenAI',
  transactionId: '@@TX@@', requestTime: '2026-11-21T23:55:47.661Z', completionStartTime: '2026-11-21T23:55:47.678Z',
  responseTime: '2026-11-21T23:55:47.678Z', requestDuration: 17, organizationName: 'AcmeOrg', productName: 'Gold',
  agent: 'agent-a', traceId: 'trace-1',
}).split('@@TX@@')
const TOOL_EVENT = JSON.stringify({
  toolId: 'bench-search', transactionId: '@@TX@@', operation: 'search', durationMs: 3, success: true,
  timestamp: '2026-11-21T23:59:06.103Z', organizationName: 'AcmeOrg', productName: 'Gold', usageMetadata: { results: 3 },
}).split('@@TX@@')

function requests(key, path, [before, after]) {
  return [{
    method: 'POST', path, headers: { 'content-type': 'application/json', 'x-api-key': key },
    setupRequest(req) {
      req.body = `${before}bench-${run}-${(seq++).toString(36)}${after}`
      return req
    },
  }]
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

header(`pricing: ingest with vs without the pricing processor, ${CONNECTIONS} connections, ${BENCH_SECONDS} s per run`)
const off = await start(['validate', 'attribution'])
const on = await start(['validate', 'attribution', 'pricing'])
const best = { completion: { off: 0, on: 0 }, tool: { off: 0, on: 0 } }
// CPU per request (all of the daemon's threads), lowest seen: far less sensitive than req/s to
// the load generator and to neighbours on a shared 2-core machine.
const cpu = { completion: { off: Infinity, on: Infinity }, tool: { off: Infinity, on: Infinity } }
let non2xx = 0
try {
  for (let round = 0; round < 2; round++) {
    for (const [kind, path, body] of [['completion', '/meter/v2/ai/completions', COMPLETION], ['tool', '/meter/v2/tool/events', TOOL_EVENT]]) {
      for (const [side, d] of [['off', off], ['on', on]]) {
        const s = await measure(d, path, body)
        non2xx += s.non2xx + s.errors
        best[kind][side] = Math.max(best[kind][side], s.rps)
        cpu[kind][side] = Math.min(cpu[kind][side], s.cpuUs)
      }
    }
  }
  // A priced record really carries its cost (the bench measures the real thing, not a no-op).
  const check = await fetch(`${on.url}/profitstream/v2/api/sources/metrics/ai/completions?size=1`, { headers: { 'x-api-key': on.key } }).then((r) => r.json())
  const cost = check._embedded.aICompletionMetricResourceList[0]?.cost
  line('sample priced record', cost ? `${cost.source} ${cost.total} USD (${cost.priceVersion})` : 'NONE')
  line('completions', `${fmt(best.completion.on)} req/s with pricing vs ${fmt(best.completion.off)} req/s without`)
  process.stdout.write(ratioLine('completions ratio', best.completion.on, best.completion.off, 0.9) + '\n')
  line('completions CPU/request', `${fmt(cpu.completion.on)} µs with pricing vs ${fmt(cpu.completion.off)} µs without (ratio without/with ${fmt(cpu.completion.off / cpu.completion.on, 2)})`)
  line('tool events', `${fmt(best.tool.on)} req/s with pricing vs ${fmt(best.tool.off)} req/s without (ratio ${fmt(best.tool.on / best.tool.off, 2)}, reported)`)
  line('tool events CPU/request', `${fmt(cpu.tool.on)} µs with pricing vs ${fmt(cpu.tool.off)} µs without (ratio without/with ${fmt(cpu.tool.off / cpu.tool.on, 2)})`)
  line('non-2xx or errors', String(non2xx))
} finally {
  await off.stop()
  await on.stop()
}
const misses = missed()
if (misses.length) process.exitCode = 1
