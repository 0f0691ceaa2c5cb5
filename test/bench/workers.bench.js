/**
 * Workers benchmark (issue 19 §1): ingest (POST /meter/v2/ai/completions, the embedded default
 * pipeline: rate limits, validation, attribution, pricing, LMDB, analytics, webhooks) with
 * `server.workers: 2` against `server.workers: 1`, in the same run, alternating rounds, driven by
 * autocannon from this process (the load generator shares the two cores with the daemon).
 * Target: best median req/s with 2 workers ≥ 1.6 × with 1. Also printed: CPU per request (the
 * supervisor and every worker, user + system), which shows what the bus (rate-limit leases,
 * analytics announcements) costs per request.
 * Run: `npm run bench -- workers` (BENCH_SECONDS=n changes the length of each run).
 */
import { execFileSync } from 'node:child_process'
import { BENCH_SECONDS, bodyTemplate, cannon, cpuSeconds, fmt, freshTransactions, header, line, median, missed, ratioLine, spawnMeterd, summarize } from './lib.js'

const PATH = '/meter/v2/ai/completions'
const CONNECTIONS = [64, 128]
const ROUNDS = 3
// Two daemons run side by side: their OTLP listeners take any free port.
const OTLP_ANY_PORT = { METERD_OTLP_GRPC_ENDPOINT: '127.0.0.1:0', METERD_OTLP_HTTP_ENDPOINT: '127.0.0.1:0' }
const CONFIG = { extensions: { ratelimit: { limits: { metering: 10_000_000, analytics: 10_000_000, platform: 10_000_000 } } } }

const setupRequest = freshTransactions(bodyTemplate())
const requests = (key) => [{ method: 'POST', path: PATH, headers: { 'content-type': 'application/json', 'x-api-key': key }, setupRequest }]

/** The daemon's processes: the supervisor and its workers (or the single process). */
function pids(root) {
  try {
    return [root, ...execFileSync('pgrep', ['-P', String(root)], { encoding: 'utf8' }).split('\n').filter(Boolean).map(Number)]
  } catch {
    return [root]
  }
}
const cpuOf = (root) => pids(root).reduce((s, p) => s + cpuSeconds(p), 0)

async function round(server, connections) {
  const cpu0 = cpuOf(server.pid)
  const s = summarize(await cannon({ url: server.url, connections, requests: requests(server.key) }))
  s.cpuUs = ((cpuOf(server.pid) - cpu0) / s.total) * 1e6
  return s
}

header(`workers: POST ${PATH} through the default pipeline, workers 2 vs 1, ${CONNECTIONS.join(' / ')} connections, ${ROUNDS} alternating rounds of ${BENCH_SECONDS} s`)
const one = await spawnMeterd({ config: CONFIG, env: { METERD_WORKERS: '1', ...OTLP_ANY_PORT } })
const two = await spawnMeterd({ config: CONFIG, env: { METERD_WORKERS: '2', ...OTLP_ANY_PORT } })
try {
  await new Promise((r) => setTimeout(r, 1500))
  // Warm both (JIT, page cache, the first commits).
  await cannon({ url: one.url, connections: 64, duration: 2, requests: requests(one.key) })
  await cannon({ url: two.url, connections: 64, duration: 2, requests: requests(two.key) })
  let best1 = 0
  let best2 = 0
  for (const connections of CONNECTIONS) {
    const r1 = []
    const r2 = []
    for (let i = 0; i < ROUNDS; i++) {
      r1.push(await round(one, connections))
      r2.push(await round(two, connections))
    }
    const m1 = median(r1.map((r) => r.rps))
    const m2 = median(r2.map((r) => r.rps))
    best1 = Math.max(best1, m1)
    best2 = Math.max(best2, m2)
    const errs = (rs) => rs.reduce((a, r) => a + r.non2xx + r.errors, 0)
    line(`${connections} conn, 1 worker`, `${fmt(m1)} req/s, p99 ${median(r1.map((r) => r.p99))} ms, ${fmt(median(r1.map((r) => r.cpuUs)))} µs CPU/request, ${errs(r1)} non-2xx/errors`)
    line(`${connections} conn, 2 workers`, `${fmt(m2)} req/s, p99 ${median(r2.map((r) => r.p99))} ms, ${fmt(median(r2.map((r) => r.cpuUs)))} µs CPU/request, ${errs(r2)} non-2xx/errors`)
    line(`${connections} conn, ratio`, (m2 / m1).toFixed(2))
  }
  process.stdout.write(ratioLine('workers 2 vs 1 (best median req/s)', best2, best1, 1.6) + '\n')
} finally {
  await one.stop()
  await two.stop()
}
const m = missed()
if (m.length) line('missed targets', m.join('; '))
