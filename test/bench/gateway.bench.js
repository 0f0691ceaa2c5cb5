/**
 * Gateway benchmark (issue 19 §3): what sharing state through Redis costs, and what three
 * replicas give on this machine. POST /meter/v2/ai/completions, each with a fresh transactionId
 * (so every request claims and commits its dedup entry in Redis), against:
 *   embedded  – one replica, standalone (server.shared_state embedded, ratelimit memory): the baseline,
 *   gateway   – one replica with the gateway's shared state and rate limits on Redis,
 *   cluster   – three gateway replicas on the same Redis, the load split evenly over them.
 * Runs alternate in rounds; ratios are medians of back-to-back pairs. BENCH_ROUNDS (default 3).
 *
 * Reported (no target: on a 2-core machine the three replicas, Redis and the load generator
 * share two cores, so the cluster's figure is a floor, not what three machines give):
 *   - completions/s and p99 of each; cluster / gateway and gateway / embedded;
 *   - the daemon's CPU per request in each, and the difference gateway − embedded: the CPU a
 *     replica spends on its Redis calls per request;
 *   - one Redis round trip (a sequential GET from this process) and the wall time the gateway
 *     adds to a request at p50.
 * Run: `npm run bench -- gateway` (BENCH_SECONDS=n changes the length of each run).
 */
import { haveRedis, startRedis } from '../helpers/redis-server.js'
import { BENCH_SECONDS, bodyTemplate, cannon, cpuSeconds, fmt, freshTransactions, header, line, median, spawnMeterd, summarize } from './lib.js'

const PATH = '/meter/v2/ai/completions'
const CONNECTIONS = 48
const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS) || 3)
const HIGH = 10_000_000
const LIMITS = { metering: HIGH, analytics: HIGH, platform: HIGH }

if (!haveRedis) {
  header('gateway: redis-server is not installed; skipped')
  process.exit(0)
}

header(`gateway: POST ${PATH}, ${CONNECTIONS} connections in all, ${ROUNDS} × ${BENCH_SECONDS} s per setup`)
const redis = await startRedis()
const gatewayConfig = {
  server: { shared_state: { backend: 'redis', redis: { url: redis.url } } },
  extensions: { ratelimit: { backend: 'redis', redis: { url: redis.url }, limits: LIMITS } },
}
// Several daemons at once: their OTLP listeners take free ports.
const env = { METERD_OTLP_GRPC_ENDPOINT: '127.0.0.1:0', METERD_OTLP_HTTP_ENDPOINT: '127.0.0.1:0', METERD_WORKERS: '1' }
const setups = [
  { name: 'embedded', replicas: [await spawnMeterd({ env, config: { extensions: { ratelimit: { limits: LIMITS } } } })] },
  { name: 'gateway', replicas: [await spawnMeterd({ env, config: gatewayConfig })] },
  { name: 'cluster', replicas: await Promise.all([0, 1, 2].map(() => spawnMeterd({ env, config: gatewayConfig }))) },
]

const template = bodyTemplate()
/** The load split over a setup's replicas; rps summed, p99 the worst replica's, CPU summed over them. */
async function run(setup, seconds = BENCH_SECONDS) {
  const cpu0 = setup.replicas.map((r) => cpuSeconds(r.pid))
  const per = Math.max(1, Math.round(CONNECTIONS / setup.replicas.length))
  const results = await Promise.all(
    setup.replicas.map((r) =>
      cannon({
        url: r.url,
        connections: per,
        duration: seconds,
        requests: [{ method: 'POST', path: PATH, headers: { 'content-type': 'application/json', 'x-api-key': r.key }, setupRequest: freshTransactions(template) }],
      }).then(summarize),
    ),
  )
  const cpu = setup.replicas.reduce((s, r, i) => s + (cpuSeconds(r.pid) - cpu0[i]), 0)
  const total = results.reduce((s, x) => s + x.total, 0)
  return {
    rps: results.reduce((s, x) => s + x.rps, 0),
    p50: Math.max(...results.map((x) => x.p50)),
    p99: Math.max(...results.map((x) => x.p99)),
    bad: results.reduce((s, x) => s + x.non2xx + x.errors, 0),
    cpuUsPerRequest: (cpu / total) * 1e6,
  }
}

const rounds = []
const all = { embedded: [], gateway: [], cluster: [] }
try {
  for (const s of setups) await run(s, 1) // warm-up
  for (let round = 1; round <= ROUNDS; round++) {
    const order = round % 2 ? setups : [...setups].reverse()
    const r = {}
    for (const s of order) {
      const x = await run(s)
      line(
        `${s.name} round ${round}`,
        `${fmt(x.rps)} completions/s, p50 ${x.p50} ms, p99 ${x.p99} ms, ${fmt(x.cpuUsPerRequest)} µs CPU per request${x.bad ? `, ${x.bad} not 201` : ''}`,
      )
      r[s.name] = x
      all[s.name].push(x)
    }
    rounds.push(r)
  }

  // One Redis round trip, as this process sees it (the replicas' own are alike on loopback).
  const { Redis } = await import('ioredis')
  const client = new Redis(redis.url)
  for (let i = 0; i < 1000; i++) await client.get('meterd:bench:rtt')
  const N = 5000
  const t0 = process.hrtime.bigint()
  for (let i = 0; i < N; i++) await client.get('meterd:bench:rtt')
  const rttUs = Number(process.hrtime.bigint() - t0) / N / 1000
  client.disconnect()

  const ratio = (a, b, f) => median(rounds.map((r) => f(r[a]) / f(r[b])))
  const med = (name, f) => median(all[name].map(f))
  process.stdout.write('\n')
  line('cluster / gateway', `${ratio('cluster', 'gateway', (x) => x.rps).toFixed(2)} completions/s (3 replicas vs 1, median of paired rounds; reported)`)
  line('gateway / embedded', `${ratio('gateway', 'embedded', (x) => x.rps).toFixed(2)} completions/s (shared state on Redis vs none)`)
  for (const name of ['embedded', 'gateway', 'cluster'])
    line(`${name} (median)`, `${fmt(med(name, (x) => x.rps))} completions/s, p99 ${fmt(med(name, (x) => x.p99))} ms, ${fmt(med(name, (x) => x.cpuUsPerRequest))} µs CPU per request`)
  line('redis round trip', `${fmt(rttUs, 1)} µs (sequential GET on loopback)`)
  line(
    'redis cost per request',
    `${fmt(med('gateway', (x) => x.cpuUsPerRequest) - med('embedded', (x) => x.cpuUsPerRequest))} µs of replica CPU, ` +
      `${fmt(med('gateway', (x) => x.p50) - med('embedded', (x) => x.p50), 1)} ms at p50 (dedup claim + commit, rate-limit hit)`,
  )
} finally {
  for (const s of setups) for (const r of s.replicas) await r.stop()
  await redis.stop()
}
