/**
 * CPU per ingest request with several workers, counted rather than timed (issue 19 §1): the
 * daemon with `server.workers: 2` (the supervisor and both workers) against `server.workers: 1`
 * (one process), each run under `valgrind --tool=callgrind --trace-children=yes`, which counts
 * the instructions every thread of every process executes. The workers bench times the same
 * comparison; on a machine shared with other work its CPU figures drift by a quarter between
 * runs, while these counts move by a few percent, so what a second worker adds per request
 * (the bus, the other worker's analytics, smaller commits) shows here even when the machine is busy.
 *
 * For each daemon: start it under callgrind with instrumentation off, wait until every worker
 * is ready, send WARMUP requests per worker (V8 compiles the hot path in each), turn
 * instrumentation on in every process and send WARMUP / 4 more, zero the counters, send exactly
 * REQUESTS requests with CONNECTIONS in flight, wait for the last answer (and for the workers'
 * analytics announcements, sent every few milliseconds, to be read), and dump. Instructions per
 * request = the dumps' total over every process and thread / REQUESTS, V8's optimizing compiler
 * left out (it is still finishing the warm-up's work). Printed per process and per thread, so a
 * difference can be placed.
 *
 * The pipeline is the workers bench's (the embedded default: rate limits, validation,
 * attribution, pricing, LMDB, analytics, webhooks), with large rate limits.
 *
 * Needs `valgrind`; without it the bench says so and exits 0. Env: CPU_REQUESTS (default
 * 2000), CPU_WARMUP (default 6000), CPU_CONNECTIONS (default 64), CPU_WORKERS (default "1,2"),
 * CPU_KEEP=1 to keep the dumps (for callgrind_annotate; their paths are printed),
 * CPU_NODE_ARGS for extra node flags (passed on to the workers).
 * Run: `npm run bench -- cluster-cpu`.
 */
import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { control, lastDump, loadCompletions, requireCallgrind } from './callgrind.js'
import { fmt, header, line, spawnMeterd } from './lib.js'

const PATH = '/meter/v2/ai/completions'
const REQUESTS = Math.max(100, Number(process.env.CPU_REQUESTS) || 2000)
const WARMUP = Math.max(100, Number(process.env.CPU_WARMUP) || 6000)
const CONNECTIONS = Math.max(1, Number(process.env.CPU_CONNECTIONS) || 64)
const WORKERS = (process.env.CPU_WORKERS ?? '1,2').split(',').map(Number).filter((n) => n >= 1)
const KEEP = Boolean(process.env.CPU_KEEP)
// As in cpu-per-request.bench.js: the young generation at the size V8 grows it to under load.
const NODE_ARGS = ['--min-semi-space-size=16', '--max-semi-space-size=16', ...(process.env.CPU_NODE_ARGS ?? '').split(' ').filter(Boolean)]
const CONFIG = {
  extensions: { ratelimit: { limits: { metering: 10_000_000, analytics: 10_000_000, platform: 10_000_000 } } },
  // No OTLP listeners: they are not on this path, and two daemons would want the same ports.
  receivers: { otlp: { grpc: { endpoint: '' }, http: { endpoint: '' } } },
}

requireCallgrind('cluster-cpu')

/**
 * The ingest load, with 503s counted rather than thrown (the count per request then includes
 * them). Under callgrind on a busy machine a worker's loop stops for seconds; its rate-limit lease
 * requests used to time out after 2 s although the supervisor had answered in milliseconds, and
 * every request waiting on the lease got a 503 (6 to 206 of 3,000). Workers now wait for the
 * answer up to server.supervisor_timeout_seconds (10 s), counted in ticks of their own loop, so
 * their own stalls do not count: a 503 here is a regression.
 */
const load = (url, key, count, connections) => loadCompletions(url, key, count, connections, { count503: true })

/** The daemon's processes: the root (the supervisor, or the one process) and its workers. */
function processes(root) {
  try {
    return [root, ...execFileSync('pgrep', ['-P', String(root)], { encoding: 'utf8' }).split('\n').filter(Boolean).map(Number)]
  } catch {
    return [root]
  }
}

async function measure(workers) {
  const dir = mkdtempSync(join(tmpdir(), 'meterd-callgrind-'))
  const wrapper = ['valgrind', '--tool=callgrind', '--trace-children=yes', '--instr-atstart=no', '--separate-threads=yes', `--callgrind-out-file=${join(dir, 'cg.%p')}`]
  const t0 = Date.now()
  const server = await spawnMeterd({ wrapper, nodeArgs: NODE_ARGS, config: CONFIG, env: { METERD_WORKERS: String(workers) }, logLevel: 'info', readyTimeoutMs: 300_000 })
  try {
    // The supervisor says so once every worker is ready (the others start after the leader).
    if (workers > 1) {
      const until = Date.now() + 300_000
      while (!server.output.some((l) => l.includes('every worker is ready'))) {
        if (Date.now() > until) throw new Error(`the workers did not get ready:\n${server.output.join('\n')}`)
        await new Promise((r) => setTimeout(r, 200))
      }
    }
    const pids = processes(server.pid)
    if (pids.length !== (workers > 1 ? workers + 1 : 1)) throw new Error(`expected ${workers} workers, found processes ${pids.join(', ')}`)
    // Every worker gets WARMUP requests (the connections are shared out round-robin).
    await load(server.url, server.key, WARMUP * workers, CONNECTIONS)
    for (const p of pids) await control(p, '--instr=on')
    await load(server.url, server.key, Math.ceil((WARMUP * workers) / 4), CONNECTIONS)
    for (const p of pids) await control(p, '--zero')
    await load(server.url, server.key, REQUESTS, CONNECTIONS)
    // The last announcements of stored records leave every few ms, and valgrind is slow.
    await new Promise((r) => setTimeout(r, 1000))
    for (const p of pids) await control(p, '--dump')
    let total = 0
    const rows = []
    for (const [i, p] of pids.entries()) {
      const threads = lastDump(dir, p)
      const compiling = threads.reduce((a, t) => a + t.compiling, 0)
      const sum = threads.reduce((a, t) => a + t.ir, 0) - compiling
      total += sum
      const main = threads.find((t) => t.thread === 1)
      const name = workers === 1 ? 'the process' : i === 0 ? 'supervisor' : `worker ${i}`
      rows.push([name, `${fmt(sum / REQUESTS)} (main ${fmt((main.ir - main.compiling) / REQUESTS)}, other threads ${fmt((sum - main.ir + main.compiling) / REQUESTS)})`])
      if (KEEP) rows.push([`  ${name}, dumps`, threads.map((t) => t.file).join(' ')])
    }
    line(`${workers} worker${workers > 1 ? 's' : ''}`, `${fmt(total / REQUESTS)} instructions/request over every process (${REQUESTS} requests, ${CONNECTIONS} in flight; ${fmt((Date.now() - t0) / 1000)} s under callgrind)`)
    for (const [l, v] of rows) line(`  ${l}`, v)
    return total / REQUESTS
  } catch (err) {
    // What the daemon said about it (warnings and errors).
    throw new Error(`${err.message}\n${server.output.filter((l) => /"level":[4-6]\d/.test(l)).slice(-10).join('\n')}`)
  } finally {
    await server.stop()
    if (!KEEP) rmSync(dir, { recursive: true, force: true })
  }
}

header(`cluster-cpu: POST ${PATH} under callgrind, workers ${WORKERS.join(' vs ')}, ${REQUESTS} requests after ${WARMUP} warm-up, ${CONNECTIONS} in flight`)
const results = new Map()
for (const w of WORKERS) results.set(w, await measure(w))
if (results.has(1)) for (const [w, ir] of results) if (w > 1) line(`${w} workers − 1, instructions/request`, `${fmt(ir - results.get(1))} (${fmt(ir / results.get(1), 3)} ×)`)
