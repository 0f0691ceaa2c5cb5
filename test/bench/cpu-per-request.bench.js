/**
 * CPU per ingest request, counted rather than timed (issue 19 §1): one meterd worker against
 * the bare node:http server of the ingest bench, each run under `valgrind --tool=callgrind`,
 * which counts the instructions every thread of the process executes. Timings on a shared VM
 * drift by a quarter between seconds; an instruction count for the same requests moves by a
 * few percent at most, so a change to the hot path shows up here even when the machine is busy.
 *
 * For each server: start it under callgrind with instrumentation off, send WARMUP requests
 * (V8 compiles the hot path), turn instrumentation on and send WARMUP / 4 more (callgrind
 * translates the compiled code again), zero the counters,
 * send exactly REQUESTS requests with CONNECTIONS in flight, wait for the last answer, and
 * dump. Instructions per request = the dump's total / REQUESTS: every thread's (main,
 * lmdb-js's write thread, libuv's pool, V8's compiler and GC threads), the garbage collection
 * those requests caused included. Every request carries a fresh transactionId, as in the
 * ingest bench, and meterd runs the ingest bench's configuration (auth, validate,
 * attribution, durable LMDB commit) with one worker.
 *
 * Both run with 16 MiB semi-spaces (the size V8 grows them to under load; see NODE_ARGS).
 *
 * Target: meterd ≤ 2 × the bare server's instructions per request. Instructions are a proxy
 * for CPU time (they leave out cache misses and stalls; the ingest bench prints measured CPU
 * per request beside its throughput).
 *
 * Needs `valgrind` (and its `callgrind_control`) on PATH; without it the bench says so and
 * exits 0. Env: CPU_REQUESTS (default 2000), CPU_WARMUP (default 8000), CPU_CONNECTIONS
 * (default 64), CPU_ONLY=bare|meterd to run one side, CPU_KEEP=1 to keep the callgrind dumps
 * (for callgrind_annotate; their paths are printed).
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
const WARMUP = Math.max(100, Number(process.env.CPU_WARMUP) || 8000)
const CONNECTIONS = Math.max(1, Number(process.env.CPU_CONNECTIONS) || 64)
const ONLY = process.env.CPU_ONLY
const KEEP = Boolean(process.env.CPU_KEEP)
// e.g. CPU_NODE_ARGS=--perf-basic-prof: /tmp/perf-<pid>.map then names the JIT code in the dumps.
// Both servers run with the young generation at the size V8 grows it to under sustained load
// (16 MiB semi-spaces): left to its heuristics, whose timing valgrind distorts, it stayed small
// in some runs, and meterd's count then doubled with scavenges (its 64 requests in flight
// survive each one).
const NODE_ARGS = ['--min-semi-space-size=16', '--max-semi-space-size=16', ...(process.env.CPU_NODE_ARGS ?? '').split(' ').filter(Boolean)]
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
  let resets = 0
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
      // A connection the server closed under us (a keep-alive race) is retried once on a new one.
      await one().catch((err) => {
        resets++
        if (resets > 10) throw err
        return one()
      })
    }
  }
  return Promise.all(Array.from({ length: connections }, worker)).then(() => {
    agent.destroy()
    if (resets) line('  connections reset and retried', String(resets))
    if (bad) throw new Error(`${bad} of ${count} answers were not 2xx (last: ${lastBad})`)
  })
}

const control = (pid, ...args) =>
  new Promise((resolve, reject) =>
    execFile('callgrind_control', [...args, String(pid)], { timeout: 120_000 }, (err, stdout) => (err ? reject(err) : resolve(stdout))),
  )

/**
 * The instructions (Ir) of the newest dump callgrind wrote for `pid` in `dir`, per thread
 * (`--separate-threads=yes` writes one file per thread: cg.<pid>.<n>-<thread>), busiest first.
 */
function lastDump(dir, pid) {
  const files = readdirSync(dir).filter((f) => f.startsWith(`cg.${pid}.`))
  const seq = (f) => Number(/^cg\.\d+\.(\d+)/.exec(f)?.[1] ?? -1)
  const last = Math.max(...files.map(seq))
  if (!files.length || last < 0) throw new Error(`callgrind wrote no dump for ${pid} in ${dir}`)
  const threads = files
    .filter((f) => seq(f) === last)
    .map((f) => {
      const text = readFileSync(join(dir, f), 'utf8')
      const m = /^totals: (\d+)/m.exec(text) ?? /^summary: (\d+)/m.exec(text)
      return { thread: Number(/-(\d+)$/.exec(f)?.[1] ?? 1), ir: m ? Number(m[1]) : 0, compiling: compilerInstructions(text), file: join(dir, f) }
    })
  return threads.sort((a, b) => b.ir - a.ir)
}

/**
 * The instructions a dump counts in V8's optimizing compiler (functions under
 * v8::internal::compiler, their own cost). Callgrind's files name each function once
 * (`fn=(id) name` or `cfn=(id) name`) and refer to it by id after.
 */
function compilerInstructions(text) {
  const names = new Map()
  let total = 0
  let compiling = 0
  let current = false
  for (const line of text.split('\n')) {
    if (line.startsWith('cfn=')) {
      const m = /^cfn=\((\d+)\) (.*)$/.exec(line)
      if (m) names.set(m[1], m[2])
    } else if (line.startsWith('fn=')) {
      const m = /^fn=\((\d+)\)(?: (.*))?$/.exec(line)
      if (m) {
        if (m[2] !== undefined) names.set(m[1], m[2])
        current = (names.get(m[1]) ?? '').includes('v8::internal::compiler::')
      }
    } else if (/^[+-]?\d/.test(line)) {
      // A cost line: position(s) then the Ir count (the last number). Calls' inclusive costs
      // follow a `calls=` line and are skipped.
      const parts = line.trim().split(/\s+/)
      const ir = Number(parts[parts.length - 1])
      if (!skipNext && Number.isFinite(ir)) {
        total += ir
        if (current) compiling += ir
      }
      skipNext = false
      continue
    }
    skipNext = line.startsWith('calls=')
  }
  return compiling
}
let skipNext = false

/** Instructions per request of a server started by `start({ wrapper, nodeArgs })`. */
async function measure(label, start, key) {
  const dir = mkdtempSync(join(tmpdir(), 'meterd-callgrind-'))
  const wrapper = ['valgrind', '--tool=callgrind', '--instr-atstart=no', '--separate-threads=yes', `--callgrind-out-file=${join(dir, 'cg.%p')}`]
  const t0 = Date.now()
  const server = await start({ wrapper, nodeArgs: NODE_ARGS })
  key ??= server.key
  if (KEEP) line(`  ${label}, pid`, String(server.pid))
  try {
    // No idle pause between the phases: V8's memory reducer would shrink the young generation
    // of an idle process, and the measured requests would pay for the scavenges of a small one.
    await load(server.url, key, WARMUP, CONNECTIONS)
    await control(server.pid, '--instr=on')
    await load(server.url, key, Math.ceil(WARMUP / 4), CONNECTIONS)
    await control(server.pid, '--zero')
    await load(server.url, key, REQUESTS, CONNECTIONS)
    await control(server.pid, '--dump')
    const threads = lastDump(dir, server.pid)
    const total = threads.reduce((a, t) => a + t.ir, 0)
    // V8's optimizing compiler still finishing the warm-up's work is not a cost per request:
    // counted apart (valgrind runs one thread at a time, so under load its threads lag behind).
    const compiling = threads.reduce((a, t) => a + t.compiling, 0)
    const perRequest = (total - compiling) / REQUESTS
    line(label, `${fmt(perRequest)} instructions/request (${REQUESTS} requests, ${CONNECTIONS} in flight; ${fmt((Date.now() - t0) / 1000)} s under callgrind)`)
    // Thread 1 is the main thread (the event loop); the others are lmdb-js's, libuv's and V8's.
    const main = threads.find((t) => t.thread === 1)
    line(
      `  ${label}, by thread`,
      `main ${fmt((main.ir - main.compiling) / REQUESTS)}, other threads ${fmt((total - main.ir - (compiling - main.compiling)) / REQUESTS)}; not counted: V8's optimizing compiler ${fmt(compiling / REQUESTS)}`,
    )
    if (KEEP) line(`  ${label}, dumps`, threads.map((t) => t.file).join(' '))
    return perRequest
  } finally {
    await server.stop()
    if (!KEEP) rmSync(dir, { recursive: true, force: true })
  }
}

header(`cpu-per-request: POST ${PATH} under callgrind, ${REQUESTS} requests after ${WARMUP} warm-up, ${CONNECTIONS} in flight`)
const readyTimeoutMs = 180_000
const results = {}
if (ONLY !== 'meterd')
  results.bare = await measure('bare node:http', (spawn) => spawnScript(baselineServer({ store: 'answer(res, body)' }), { ...spawn, readyTimeoutMs }), '-')
if (ONLY !== 'bare')
  results.meterd = await measure(
    'meterd, one worker',
    (spawn) =>
      spawnMeterd({
        ...spawn,
        // No OTLP listeners: they are not on this path, and their fixed ports may be taken.
        config: { ...INGEST_CONFIG, receivers: { otlp: { grpc: { endpoint: '' }, http: { endpoint: '' } } } },
        readyTimeoutMs,
      }),
    undefined,
  )
if (results.bare && results.meterd) {
  process.stdout.write('\n')
  line('meterd / bare, instructions per request', `${fmt(results.meterd / results.bare, 2)} (target ≤ ${TARGET}) ${check('CPU per request ≤ 2 × bare', results.meterd / results.bare <= TARGET)}`)
  const miss = missed()
  line('cpu-per-request targets', miss.length ? `missed: ${miss.join(', ')}` : 'all met')
}
