/**
 * Workers benchmark (issue 19 §1): ingest (POST /meter/v2/ai/completions, the embedded default
 * pipeline: rate limits, validation, attribution, pricing, LMDB, analytics, webhooks) with
 * `server.workers: 2` against `server.workers: 1`, in the same run, alternating rounds. The load
 * generator shares the two cores with the daemon, so what it costs per request bounds the
 * ratio: with w the daemon's CPU per request and g the generator's, two saturated cores give
 * one worker at most 2/(w+g) requests per CPU-second and two workers 2/(w+g) as well once
 * both cores are full; the bench prints g and the bound 2w/(w+g) beside each ratio.
 *
 * Two generators, each in its own alternating rounds: `wrk` (C, a few µs of CPU per request;
 * Debian's `apt-get install wrk`, 4.1 or later, whose Lua `request()` gives every request a
 * transactionId of its own), which the target is judged on when it is installed, and autocannon
 * (in this process, tens of µs per request), as before. Without wrk the bench says how to
 * install it and runs autocannon alone.
 * Target: best median req/s with 2 workers ≥ 1.6 × with 1. Also printed: CPU per request (the
 * supervisor and every worker, user + system), which shows what the bus (rate-limit leases,
 * analytics announcements) costs per request.
 * Run: `npm run bench -- workers` (BENCH_SECONDS=n changes the length of each run;
 * BENCH_LOAD=wrk or autocannon runs one generator only).
 */
import { execFile, execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { BENCH_SECONDS, bodyTemplate, cannon, cpuSeconds, fmt, freshTransactions, header, line, median, missed, ratioLine, spawnMeterd, summarize } from './lib.js'

const PATH = '/meter/v2/ai/completions'
// Durable commits: the daemon needs many requests in flight to keep both cores busy (as in the ingest bench).
const CONNECTIONS = [64, 128, 256]
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

const [before, after] = bodyTemplate()
const RUN = `${process.pid.toString(36)}-${Date.now().toString(36)}`
const work = mkdtempSync(join(tmpdir(), 'meterd-bench-wrk-'))
let wrkRun = 0

const hasWrk = (() => {
  try {
    execFileSync('wrk', ['--version'], { stdio: 'ignore' })
    return true
  } catch (err) {
    // wrk prints its version and exits 1; only a missing binary is an ENOENT.
    return err.code !== 'ENOENT'
  }
})()
const lua = (s) => `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\r/g, '\\r').replace(/\n/g, '\\n')}"`

/**
 * One wrk run (one thread, `connections` connections, --latency), every request with a
 * transactionId of its own: the Lua state of wrk's thread builds each body. Resolves with the
 * run's figures and wrk's own CPU time (its children's times, from the shell that waited for it).
 */
function wrk(url, key, connections, seconds) {
  const script = join(work, `run-${wrkRun++}.lua`)
  writeFileSync(
    script,
    // The request's bytes are built by concatenation around a fixed-width counter (so its
    // Content-Length is a constant): wrk.format per request doubled wrk's CPU per request.
    `local n = 0
local head = ${lua(`POST ${PATH} HTTP/1.1\r\nHost: ${new URL(url).host}\r\ncontent-type: application/json\r\nx-api-key: ${key}\r\n`)}
local before, after = ${lua(before)}, ${lua(after)}
local prefix = ${lua(`wrk-${RUN}-${wrkRun}-`)}
head = head .. "Content-Length: " .. (#before + #prefix + 10 + #after) .. "\\r\\n\\r\\n" .. before .. prefix
request = function()
  n = n + 1
  return head .. string.format("%010d", n) .. after
end
`,
  )
  const cmd = `wrk -t1 -c${connections} -d${seconds}s --latency -s '${script}' '${url}'; times`
  return new Promise((resolve, reject) =>
    execFile('bash', ['-c', cmd], { maxBuffer: 1 << 20 }, (err, out) => {
      if (err) return reject(err)
      const num = (re) => Number(re.exec(out)?.[1] ?? 0)
      const ms = (re) => {
        const m = re.exec(out)
        if (!m) return NaN
        return Number(m[1]) * (m[2] === 'us' ? 0.001 : m[2] === 's' ? 1000 : 1)
      }
      const total = num(/(\d+) requests in/)
      // `times`: the shell's user and system time, then its children's (wrk's).
      const t = /\n(\d+)m([\d.]+)s (\d+)m([\d.]+)s\s*$/.exec(out)
      const genSeconds = t ? Number(t[1]) * 60 + Number(t[2]) + Number(t[3]) * 60 + Number(t[4]) : NaN
      resolve({
        rps: num(/Requests\/sec:\s+([\d.]+)/),
        total,
        p99: ms(/\s99%\s+([\d.]+)(us|ms|s)/),
        non2xx: num(/Non-2xx or 3xx responses: (\d+)/),
        errors: [...out.matchAll(/(?:connect|read|write|timeout) (\d+)/g)].reduce((a, m) => a + Number(m[1]), 0),
        genUs: (genSeconds / total) * 1e6,
      })
    }),
  )
}

async function round(server, connections, generator) {
  const cpu0 = cpuOf(server.pid)
  let s
  if (generator === 'wrk') s = await wrk(server.url, server.key, connections, BENCH_SECONDS)
  else {
    const own0 = process.cpuUsage()
    s = summarize(await cannon({ url: server.url, connections, requests: requests(server.key) }))
    const own = process.cpuUsage(own0)
    s.genUs = ((own.user + own.system) / s.total)
  }
  s.cpuUs = ((cpuOf(server.pid) - cpu0) / s.total) * 1e6
  return s
}

const only = process.env.BENCH_LOAD
const generators = (hasWrk ? ['wrk', 'autocannon'] : ['autocannon']).filter((g) => !only || g === only)
header(`workers: POST ${PATH} through the default pipeline, workers 2 vs 1, ${CONNECTIONS.join(' / ')} connections, ${ROUNDS} alternating rounds of ${BENCH_SECONDS} s, load from ${generators.join(' and ')}`)
if (!hasWrk) line('wrk', 'not installed: the ratio below is bounded by autocannon\'s own CPU per request (apt-get install wrk)')
const one = await spawnMeterd({ config: CONFIG, env: { METERD_WORKERS: '1', ...OTLP_ANY_PORT } })
const two = await spawnMeterd({ config: CONFIG, env: { METERD_WORKERS: '2', ...OTLP_ANY_PORT } })
try {
  await new Promise((r) => setTimeout(r, 1500))
  // Warm both (JIT, page cache, the first commits).
  await cannon({ url: one.url, connections: 64, duration: 2, requests: requests(one.key) })
  await cannon({ url: two.url, connections: 64, duration: 2, requests: requests(two.key) })
  for (const generator of generators) {
    let best1 = 0
    let best2 = 0
    for (const connections of CONNECTIONS) {
      const r1 = []
      const r2 = []
      for (let i = 0; i < ROUNDS; i++) {
        r1.push(await round(one, connections, generator))
        r2.push(await round(two, connections, generator))
      }
      const m1 = median(r1.map((r) => r.rps))
      const m2 = median(r2.map((r) => r.rps))
      best1 = Math.max(best1, m1)
      best2 = Math.max(best2, m2)
      const errs = (rs) => rs.reduce((a, r) => a + r.non2xx + r.errors, 0)
      const w1 = median(r1.map((r) => r.cpuUs))
      const w2 = median(r2.map((r) => r.cpuUs))
      const g = median([...r1, ...r2].map((r) => r.genUs))
      line(`${generator}, ${connections} conn, 1 worker`, `${fmt(m1)} req/s, p99 ${fmt(median(r1.map((r) => r.p99)), 1)} ms, ${fmt(w1)} µs CPU/request, ${errs(r1)} non-2xx/errors`)
      line(`${generator}, ${connections} conn, 2 workers`, `${fmt(m2)} req/s, p99 ${fmt(median(r2.map((r) => r.p99)), 1)} ms, ${fmt(w2)} µs CPU/request, ${errs(r2)} non-2xx/errors`)
      line(`${generator}, ${connections} conn, ratio`, `${(m2 / m1).toFixed(2)} (the generator's CPU per request ${fmt(g, 1)} µs; bound 2w/(w+g) with w = 2 workers' CPU/request: ${((2 * w2) / (w2 + g)).toFixed(2)})`)
    }
    const judged = generator === generators[0]
    if (judged) process.stdout.write(ratioLine(`workers 2 vs 1, ${generator} (best median req/s)`, best2, best1, 1.6) + '\n')
    else line(`workers 2 vs 1, ${generator} (best median req/s)`, `${(best2 / best1).toFixed(2)} (for comparison)`)
  }
} finally {
  await one.stop()
  await two.stop()
  rmSync(work, { recursive: true, force: true })
}
const m = missed()
if (m.length) line('missed targets', m.join('; '))
