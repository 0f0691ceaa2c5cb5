/**
 * Helpers for meterd's benchmarks (test/bench/*.bench.js). Plain ESM, no build step; the
 * daemon itself runs from the compiled output (`npm run bench` builds first).
 *
 * Stable API, used by several benches — add to it, do not change what exists:
 *   PACKAGE_ROOT, BENCH_KEY
 *   freePort()                                   → a free TCP port on 127.0.0.1
 *   spawnMeterd({ config?, env?, logLevel?, nodeArgs?, wrapper?, readyTimeoutMs? })
 *                                                → a child `meterd run` with a temp data dir
 *                                                  (wrapper: a command prefixed to node's, e.g. valgrind)
 *   spawnScript(source, { env?, wrapper?, nodeArgs?, readyTimeoutMs? }) → a child `node` running an ESM source string
 *   baselineServer({ prelude?, store })          → the source of a node:http server that parses the body
 *   INGEST_CONFIG                                → the config the ingest benches run meterd with
 *   waitReady(url, { path?, timeoutMs? })        → polls until GET url+path answers 200
 *   cannon(opts)                                 → runs autocannon, resolves to its result
 *   paced({ url, rate, seconds?, request })      → open-loop load at an even rate, latency percentiles
 *   summarize(result)                            → { rps, p50, p99, max, ok, errors, non2xx }
 *   rssMiB(pid)                                  → VmRSS of a process in MiB (Linux /proc)
 *   cpuSeconds(pid)                              → CPU time (user + system, all threads) used so far
 *   sampleRss(pid, everyMs?)                     → { stop() → peak MiB } while something runs
 *   ratioLine(label, value, base, target)        → "label: 0.63 (target ≥ 0.5) OK"
 *   check(label, ok)                             → "OK" / "MISS" and remembers misses
 *   header(title), line(label, value)            → uniform output
 *   BENCH_SECONDS                                → seconds per measured run (env BENCH_SECONDS, default 5)
 */
import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'
import { stringify } from 'yaml'

export const PACKAGE_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..')

/** The first admin key of every daemon spawned here (METERD_BOOTSTRAP_API_KEY). */
export const BENCH_KEY = 'hak_bench_adminadminadminadminadminad01'

/** Seconds per measured autocannon run; small by default so `npm run bench` stays bounded. */
export const BENCH_SECONDS = Math.max(1, Number(process.env.BENCH_SECONDS) || 5)

import { freePort } from '../helpers/net.js'

export { freePort }

/** Polls GET url+path until it answers 200 (or throws after timeoutMs). */
export async function waitReady(url, { path = '/readyz', timeoutMs = 15_000, proc } = {}) {
  const until = Date.now() + timeoutMs
  for (;;) {
    if (proc && (proc.exitCode !== null || proc.signalCode !== null)) throw new Error(`process exited early (${proc.exitCode ?? proc.signalCode})`)
    try {
      const r = await fetch(url + path)
      await r.arrayBuffer()
      if (r.status === 200) return
    } catch {}
    if (Date.now() > until) throw new Error(`${url}${path} did not answer 200 within ${timeoutMs} ms`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

/** Keeps the last lines a child wrote, for error messages; never lets its pipe fill up. */
function tail(proc, max = 200) {
  const lines = []
  const keep = (d) => {
    for (const l of String(d).split('\n')) if (l) lines.push(l)
    if (lines.length > max) lines.splice(0, lines.length - max)
  }
  proc.stdout?.on('data', keep)
  proc.stderr?.on('data', keep)
  return lines
}

// Children still running when this process ends (a crash, Ctrl-C, a closed stdout pipe)
// are killed with it, so a bench never leaves a daemon behind.
const children = new Map() // process → its cleanup
process.once('exit', () => {
  for (const [c, cleanup] of children) {
    c.kill('SIGKILL')
    cleanup?.()
  }
})
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'])
  process.once(sig, () => {
    process.exitCode = 130
    process.exit()
  })
process.stdout.on('error', () => process.exit(1)) // EPIPE: the reader went away

function stopper(proc, cleanup) {
  children.set(proc, cleanup)
  const exited = new Promise((resolve) =>
    proc.once('exit', (code, sig) => {
      children.delete(proc)
      resolve(code ?? sig)
    }),
  )
  let done
  return (signal = 'SIGTERM') =>
    (done ??= (async () => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal)
      const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000)
      const code = await exited
      clearTimeout(timer)
      cleanup?.()
      return code
    })())
}

/**
 * Starts `node bin/meterd.js run --config config/meterd.yaml --config <tmp yaml>` on a free
 * 127.0.0.1 port with a fresh data directory and BENCH_KEY as its first admin key; resolves
 * once /readyz answers 200. `config` is merged over the embedded default (maps merge, lists
 * are replaced). The data directory is removed by stop().
 *
 * @returns {Promise<{ url: string, port: number, pid: number, proc: import('node:child_process').ChildProcess,
 *   dataDir: string, key: string, output: string[], stop(signal?: string): Promise<unknown> }>}
 */
export async function spawnMeterd({ config = {}, env = {}, logLevel = 'warn', nodeArgs = [], wrapper = [], readyTimeoutMs } = {}) {
  const port = await freePort()
  // From here to stopper() all is synchronous, so an exit at any moment removes the directory.
  const dir = mkdtempSync(join(tmpdir(), 'meterd-bench-'))
  const dataDir = join(dir, 'data')
  const file = join(dir, 'bench.yaml')
  writeFileSync(file, stringify(config))
  const argv = [process.execPath, ...nodeArgs, join(PACKAGE_ROOT, 'bin', 'meterd.js'), 'run', '--config', join(PACKAGE_ROOT, 'config', 'meterd.yaml'), '--config', file]
  const command = [...wrapper, ...argv]
  const proc = spawn(
    command[0],
    command.slice(1),
    {
      cwd: dir,
      env: {
        ...process.env,
        METERD_ENDPOINT: `127.0.0.1:${port}`,
        METERD_DATA_DIR: dataDir,
        METERD_BOOTSTRAP_API_KEY: BENCH_KEY,
        METERD_LOG_LEVEL: logLevel,
        METERD_WORKERS: '1',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  )
  const stop = stopper(proc, () => rmSync(dir, { recursive: true, force: true }))
  const output = tail(proc)
  const url = `http://127.0.0.1:${port}`
  try {
    await waitReady(url, { proc, timeoutMs: readyTimeoutMs })
  } catch (err) {
    await stop('SIGKILL')
    throw new Error(`meterd did not start: ${err.message}\n${output.join('\n')}`)
  }
  return { url, port, pid: proc.pid, proc, dataDir, key: BENCH_KEY, output, stop }
}

/**
 * Runs an ESM source string in a child `node` (so a comparison server gets its own core,
 * like the daemon). The child gets env PORT=<free port>; resolves once GET /readyPath
 * answers 200 (default '/').
 */
export async function spawnScript(source, { env = {}, readyPath = '/', wrapper = [], nodeArgs = [], readyTimeoutMs } = {}) {
  const port = await freePort()
  const command = [...wrapper, process.execPath, ...nodeArgs, '--input-type=module', '-e', source]
  const proc = spawn(command[0], command.slice(1), {
    env: { ...process.env, PORT: String(port), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const output = tail(proc)
  const url = `http://127.0.0.1:${port}`
  const stop = stopper(proc)
  try {
    await waitReady(url, { path: readyPath, proc, timeoutMs: readyTimeoutMs })
  } catch (err) {
    await stop('SIGKILL')
    throw new Error(`script did not start: ${err.message}\n${output.join('\n')}`)
  }
  return { url, port, pid: proc.pid, proc, output, stop }
}

/** autocannon as a promise; options as autocannon's (url, connections, duration, overallRate, requests…). */
export function cannon(opts) {
  return new Promise((resolve, reject) => {
    autocannon({ connections: 32, duration: BENCH_SECONDS, ...opts }, (err, result) => (err ? reject(err) : resolve(result)))
  })
}

/**
 * An open-loop load at an even pace: `rate` requests per second, each sent at its own
 * scheduled time (not in bursts), latency measured from that scheduled time, so a slow
 * answer cannot hide the requests queued behind it (no coordinated omission). autocannon's
 * `overallRate` instead sends each connection's quota for a second back to back at the start
 * of that second, which measures burst latency. `request()` returns { path, method, headers, body }.
 * Resolves to { sent, ok, non2xx, errors, rps, p50, p90, p99, max, lateP99 } (in ms). `lateP99`
 * is how late this process sent its requests (p99 of send time − scheduled time): the
 * latency the load generator's own wake-ups add on this machine, which no server can remove.
 */
export async function paced({ url, rate, seconds = BENCH_SECONDS, connections = 64, request }) {
  const { Pool } = await import('undici')
  const pool = new Pool(url, { connections, pipelining: 1 })
  const latencies = []
  const lateness = []
  let ok = 0
  let non2xx = 0
  let errors = 0
  let sent = 0
  const total = Math.round(rate * seconds)
  const start = performance.now()
  const inflight = []
  const fire = (due) => {
    lateness.push(performance.now() - due)
    const r = request()
    const p = pool
      .request({ method: r.method ?? 'POST', path: r.path, headers: r.headers, body: r.body })
      .then(async (res) => {
        await res.body.dump()
        latencies.push(performance.now() - due)
        if (res.statusCode >= 200 && res.statusCode < 300) ok++
        else non2xx++
      })
      .catch(() => errors++)
    inflight.push(p)
  }
  await new Promise((resolve) => {
    const tick = () => {
      const now = performance.now()
      const due = Math.min(total, Math.floor(((now - start) * rate) / 1000) + 1)
      while (sent < due) fire(start + (sent++ * 1000) / rate)
      if (sent >= total) return resolve()
      setTimeout(tick, Math.max(0, start + (sent * 1000) / rate - performance.now()))
    }
    tick()
  })
  await Promise.all(inflight)
  const elapsed = (performance.now() - start) / 1000
  await pool.close()
  const percentile = (xs, p) => (xs.length ? xs[Math.min(xs.length - 1, Math.ceil((p / 100) * xs.length) - 1)] : NaN)
  latencies.sort((a, b) => a - b)
  lateness.sort((a, b) => a - b)
  const q = (p) => percentile(latencies, p)
  return { sent, ok, non2xx, errors, rps: sent / elapsed, p50: q(50), p90: q(90), p99: q(99), max: latencies[latencies.length - 1] ?? NaN, lateP99: percentile(lateness, 99) }
}

/** The figures every bench prints, from an autocannon result. */
export function summarize(r) {
  return {
    rps: r.requests.average,
    total: r.requests.total,
    p50: r.latency.p50,
    p99: r.latency.p99,
    max: r.latency.max,
    ok: r['2xx'],
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts,
  }
}

/** VmRSS of a process in MiB (Linux), or NaN when it cannot be read. */
export function rssMiB(pid) {
  try {
    const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
    return m ? Number(m[1]) / 1024 : NaN
  } catch {
    return NaN
  }
}

/**
 * A process's resident memory split in MiB (Linux): `anon` is the heap and buffers, `file` the
 * file-backed pages, for meterd mostly LMDB's memory-mapped data file (page cache the kernel
 * reclaims under pressure, growing with the data).
 */
export function rssParts(pid) {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8')
    const kb = (name) => Number(new RegExp(`^${name}:\\s+(\\d+)\\s+kB`, 'm').exec(status)?.[1] ?? NaN)
    return { anon: kb('RssAnon') / 1024, file: kb('RssFile') / 1024 }
  } catch {
    return { anon: NaN, file: NaN }
  }
}

/**
 * CPU seconds (user + system, every thread) a process has used (Linux /proc; 100 ticks a
 * second). The difference over a run divided by the requests served is the CPU cost of one
 * request, a figure that stays meaningful when other work shares the machine.
 */
export function cpuSeconds(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return (Number(f[11]) + Number(f[12])) / 100
  } catch {
    return NaN
  }
}

/**
 * The share of CPU time the hypervisor gave to other guests (steal) since the call, as a
 * percentage, from /proc/stat; call the returned function to read it. On a shared VM a run
 * with high steal is not comparable with one without.
 */
export function stealMeter() {
  const read = () => {
    try {
      const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number)
      return { steal: f[7] ?? 0, total: f.slice(0, 8).reduce((a, b) => a + b, 0) }
    } catch {
      return { steal: NaN, total: NaN }
    }
  }
  const start = read()
  return () => {
    const end = read()
    return end.total > start.total ? (100 * (end.steal - start.steal)) / (end.total - start.total) : NaN
  }
}

/** The median of a list of numbers. */
export const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}

/** Samples a process's RSS every `everyMs` until stop(); stop() returns the peak in MiB. */
export function sampleRss(pid, everyMs = 200) {
  let peak = rssMiB(pid)
  const timer = setInterval(() => {
    const v = rssMiB(pid)
    if (!(v <= peak)) peak = v
  }, everyMs)
  return {
    stop() {
      clearInterval(timer)
      const v = rssMiB(pid)
      if (v > peak) peak = v
      return peak
    },
  }
}

const misses = []
/** "OK" or "MISS"; misses are remembered (see misses()). */
export function check(label, ok) {
  if (!ok) misses.push(label)
  return ok ? 'OK' : 'MISS'
}
/** Labels of the targets missed so far in this process. */
export function missed() {
  return [...misses]
}

/** `label: 0.63 (target ≥ 0.5) OK` — value/base against a minimum ratio. */
export function ratioLine(label, value, base, target) {
  const ratio = base > 0 ? value / base : 0
  return `${pad(label)} ${ratio.toFixed(2)} (target ≥ ${target}) ${check(label, ratio >= target)}`
}

export const pad = (s, n = 34) => (s + ':').padEnd(n)
export const fmt = (n, digits = 0) => (Number.isFinite(n) ? n.toFixed(digits) : String(n))

export function header(title) {
  process.stdout.write(`\n== ${title} ==\n`)
}

export function line(label, value) {
  process.stdout.write(`${pad(label)} ${value}\n`)
}

// wire-contract.md §1.6 #1 (@revenium/litellm), the body every ingest bench posts.
export const LITELLM_COMPLETION = {
  stopReason: 'TOKEN_LIMIT', costType: 'AI', isStreamed: false, operationType: 'CHAT',
  inputTokenCount: 12, outputTokenCount: 5, reasoningTokenCount: 0, cacheCreationTokenCount: 0,
  cacheReadTokenCount: 0, totalTokenCount: 17, model: 'gpt-4o-mini', modelSource: 'OPENAI',
  transactionId: '@@TX@@', responseTime: '2026-11-21T23:55:47.678Z',
  requestDuration: 17, provider: 'OpenAI', requestTime: '2026-11-21T23:55:47.661Z',
  completionStartTime: '2026-11-21T23:55:47.678Z', timeToFirstToken: 17, middlewareSource: 'nodejs',
  traceId: 'trace-1', taskType: 'chat', agent: 'agent-a', organizationName: 'AcmeOrg', productName: 'Gold',
  subscriber: { id: 'u-1', email: 'u1@example.com', credential: { name: 'key', value: 'cred-1' } },
  retryNumber: 0, region: 'local-test',
}

/** The JSON of `body` cut around its `@@TX@@` placeholder: `${before}${transactionId}${after}` is a request body. */
export function bodyTemplate(body = LITELLM_COMPLETION) {
  return JSON.stringify(body).split('@@TX@@')
}

const RUN = `${process.pid.toString(36)}-${Date.now().toString(36)}`
let txSeq = 0
/**
 * An autocannon `setupRequest` that gives each request a transactionId of its own in a
 * bodyTemplate() body, so no request is answered from the dedup index.
 */
export function freshTransactions([before, after]) {
  return (req) => {
    req.body = `${before}bench-${RUN}-${(txSeq++).toString(36)}${after}`
    return req
  }
}

/**
 * A baseline server's source: reads and parses the body as every Node server must, then runs
 * `store` (which has `buf`, `body` and `answer()`; it answers 201 now or once its write is done).
 */
export function baselineServer({ prelude = '', store }) {
  return `
import { createServer } from 'node:http'
import { randomUUID } from 'node:crypto'
${prelude}
function answer(res, body) {
  const out = JSON.stringify({ id: randomUUID(), resourceType: 'metering', label: 'AI Completion', signature: String(body.transactionId), created: new Date().toISOString() })
  res.writeHead(201, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) })
  res.end(out)
}
createServer((req, res) => {
  if (req.method !== 'POST') { res.writeHead(200); return res.end('ok') }
  const chunks = []
  req.on('data', (c) => chunks.push(c))
  req.on('end', () => {
    const buf = Buffer.concat(chunks)
    let body
    try { body = JSON.parse(buf.toString('utf8')) } catch { res.writeHead(400); return res.end() }
    ${store}
  })
}).listen(Number(process.env.PORT), '127.0.0.1')
`
}


// Exactly the path the target names (auth → validate → attribute → durable LMDB commit): no
// pricing or webhooks, and no ratelimit extension (its default 1,000 req/s per account would
// refuse the throughput run).
export const INGEST_CONFIG = {
  service: {
    extensions: ['apikeys'],
    pipelines: { usage: { receivers: ['metering', 'genai'], processors: ['validate', 'attribution'], exporters: ['lmdb'] } },
  },
}

