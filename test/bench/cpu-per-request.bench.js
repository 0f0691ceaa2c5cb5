/**
 * CPU per ingest request, counted rather than timed (issue 19 §1): one meterd worker against
 * the bare node:http server of the ingest bench, each run under `valgrind --tool=callgrind`,
 * which counts the instructions every thread of the process executes. Timings on a shared VM
 * drift by a quarter between seconds; an instruction count for the same requests moves by a
 * few percent at most, so a change to the hot path shows up here even when the machine is busy.
 *
 * For each server: start it under callgrind with instrumentation off, send WARMUP requests
 * (V8 compiles the hot path), turn instrumentation on and send WARMUP / 4 more (callgrind
 * translates the compiled code again), wait until nothing is in flight, zero the counters,
 * send exactly REQUESTS requests with CONNECTIONS in flight, wait for the last answer, and
 * dump. Instructions per request = the dump's total / REQUESTS: every thread's (main,
 * lmdb-js's write thread, libuv's pool, V8's compiler and GC threads), the garbage collection
 * those requests caused included. Every request carries a fresh transactionId, as in the
 * ingest bench, and meterd runs the ingest bench's configuration (auth, validate,
 * attribution, durable LMDB commit) with one worker.
 *
 * Target: meterd ≤ 2 × the bare server's instructions per request. Instructions are a proxy
 * for CPU time (they leave out cache misses and stalls; the ingest bench prints measured CPU
 * per request beside its throughput).
 *
 * Needs `valgrind` (and its `callgrind_control`) on PATH; without it the bench says so and
 * exits 0. Env: CPU_REQUESTS (default 2000), CPU_WARMUP (default 3000), CPU_CONNECTIONS
 * (default 64), CPU_ONLY=bare|meterd to run one side.
 * Run: `npm run bench -- cpu-per-request`.
 */
import { execFile, execFileSync } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { Agent, request as httpRequest } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { baselineServer, bodyTemplate, check, fmt, header, INGEST_CONFIG, line, missed, spawnMeterd, spawnScript } from './lib.js'

const PATH = '/meter/v2/ai/completions'
const REQUESTS = Math.max(100, Number(process.env.CPU_REQUESTS) || 2000)
const WARMUP = Math.max(100, Number(process.env.CPU_WARMUP) || 3000)
const CONNECTIONS = Math.max(1, Number(process.env.CPU_CONNECTIONS) || 64)
const ONLY = process.env.CPU_ONLY
const TARGET = 2

try {
  execFileSync('valgrind', ['--version'], { stdio: 'ignore' })
  execFileSync('callgrind_control', ['-h'], { stdio: 'ignore' })
} catch {
  header('cpu-per-request: valgrind (callgrind) is not installed; skipped')
  process.exit(0)
}

const [before, after] = bodyTemplate()
const run = `${process.pid.toString(36)}-${Date.now().toString(36)}`
let seq = 0

/** Sends `count` POSTs with `connections` in flight, resolves when every answer is in; throws on a non-2xx. */
function load(url, key, count, connections) {
  const agent = new Agent({ keepAlive: true, maxSockets: connections })
  const { hostname, port } = new URL(url)
  let sent = 0
  let bad = 0
  let lastBad = ''
  const one = () =>
    new Promise((resolve, reject) => {
      const body = `${before}cpu-${run}-${(seq++).toString(36)}${after}`
      const req = httpRequest(
        { agent, hostname, port, path: PATH, method: 'POST', headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-api-key': key } },
        (res) => {
          const chunks = []
          res.on('data', (c) => chunks.push(c))
          res.on('end', () => {
            if (res.statusCode < 200 || res.statusCode > 299) {
              bad++
              lastBad = `${res.statusCode} ${Buffer.concat(chunks).toString().slice(0, 200)}`
            }
            resolve()
          })
        },
      )
      req.on('error', reject)
      req.end(body)
    })
  const worker = async () => {
    while (sent < count) {
      sent++
      await one()
    }
  }
  return Promise.all(Array.from({ length: connections }, worker)).then(() => {
    agent.destroy()
    if (bad) throw new Error(`${bad} of ${count} answers were not 2xx (last: ${lastBad})`)
  })
}

const control = (pid, ...args) =>
  new Promise((resolve, reject) =>
    execFile('callgrind_control', [...args, String(pid)], { timeout: 120_000 }, (err, stdout) => (err ? reject(err) : resolve(stdout))),
  )

/** The `totals:` (Ir) of the newest dump callgrind wrote for `pid` in `dir`. */
function lastDumpTotal(dir, pid) {
  const dumps = readdirSync(dir)
    .filter((f) => f.startsWith(`cg.${pid}.`))
    .sort((a, b) => Number(a.split('.').pop()) - Number(b.split('.').pop()))
  if (!dumps.length) throw new Error(`callgrind wrote no dump for ${pid} in ${dir}`)
  const m = /^totals: (\d+)/m.exec(readFileSync(join(dir, dumps.at(-1)), 'utf8')) ?? /^summary: (\d+)/m.exec(readFileSync(join(dir, dumps.at(-1)), 'utf8'))
  if (!m) throw new Error(`no totals in ${dumps.at(-1)}`)
  return Number(m[1])
}

/** Instructions per request of a server started by `start(wrapper)`. */
async function measure(label, start, key) {
  const dir = mkdtempSync(join(tmpdir(), 'meterd-callgrind-'))
  const wrapper = ['valgrind', '--tool=callgrind', '--instr-atstart=no', `--callgrind-out-file=${join(dir, 'cg.%p')}`]
  const t0 = Date.now()
  const server = await start(wrapper)
  key ??= server.key
  try {
    await load(server.url, key, WARMUP, CONNECTIONS)
    await control(server.pid, '--instr=on')
    await load(server.url, key, Math.ceil(WARMUP / 4), CONNECTIONS)
    await control(server.pid, '--zero')
    await load(server.url, key, REQUESTS, CONNECTIONS)
    await control(server.pid, '--dump')
    const total = lastDumpTotal(dir, server.pid)
    const perRequest = total / REQUESTS
    line(label, `${fmt(perRequest)} instructions/request (${fmt(total / 1e6, 1)} M over ${REQUESTS} requests, ${CONNECTIONS} in flight; ${fmt((Date.now() - t0) / 1000)} s under callgrind)`)
    return perRequest
  } finally {
    await server.stop()
    rmSync(dir, { recursive: true, force: true })
  }
}

header(`cpu-per-request: POST ${PATH} under callgrind, ${REQUESTS} requests after ${WARMUP} warm-up, ${CONNECTIONS} in flight`)
const readyTimeoutMs = 180_000
const results = {}
if (ONLY !== 'meterd')
  results.bare = await measure('bare node:http', (wrapper) => spawnScript(baselineServer({ store: 'answer(res, body)' }), { wrapper, readyTimeoutMs }), '-')
if (ONLY !== 'bare')
  results.meterd = await measure(
    'meterd, one worker',
    (wrapper) =>
      spawnMeterd({
        config: INGEST_CONFIG,
        wrapper,
        readyTimeoutMs,
        // No OTLP listeners: they are not on this path, and their fixed ports may be taken.
        env: { METERD_OTLP_GRPC_ENDPOINT: '', METERD_OTLP_HTTP_ENDPOINT: '' },
      }),
    undefined,
  )
if (results.bare && results.meterd) {
  process.stdout.write('\n')
  line('meterd / bare, instructions per request', `${fmt(results.meterd / results.bare, 2)} (target ≤ ${TARGET}) ${check('CPU per request ≤ 2 × bare', results.meterd / results.bare <= TARGET)}`)
  const miss = missed()
  line('cpu-per-request targets', miss.length ? `missed: ${miss.join(', ')}` : 'all met')
}
