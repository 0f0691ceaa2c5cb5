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
 * One part of the count is known not to be what the CPU runs: valgrind does not emulate the SHA
 * extensions (SHA-NI), so the SHA-256 of the 201's `signature` runs OpenSSL's software path
 * here. The bench counts the SHA-256 block functions apart, measures natively how much CPU time
 * a block takes with the extensions and without (nativeSha256Ratio), and prints the total with
 * the counted SHA-256 scaled by that ratio beside the count: an estimate, labelled as one. The
 * target is checked on the count.
 *
 * Needs `valgrind` (and its `callgrind_control`) on PATH; without it the bench says so and
 * exits 0. Env: CPU_REQUESTS (default 2000), CPU_WARMUP (default 8000), CPU_CONNECTIONS
 * (default 64), CPU_ONLY=bare|meterd to run one side, CPU_KEEP=1 to keep the callgrind dumps
 * (for callgrind_annotate; their paths are printed).
 * Run: `npm run bench -- cpu-per-request`.
 */
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { completionBody, control, lastDump, loadCompletions as load, requireCallgrind } from './callgrind.js'
import { baselineServer, check, fmt, header, INGEST_CONFIG, line, missed, spawnMeterd, spawnScript } from './lib.js'

const PATH = '/meter/v2/ai/completions'
// OpenSSL's SHA-256 block functions (sha256_block_data_order and its variants): counted apart, see nativeSha256Ratio.
const SHA256_BLOCKS = /^sha256_block_data_order/
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

requireCallgrind('cpu-per-request')

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
    const threads = lastDump(dir, server.pid, { sha256: (name) => SHA256_BLOCKS.test(name) })
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
    const sha256 = threads.reduce((a, t) => a + t.sha256, 0) / REQUESTS
    const sha256Fns = [...new Set(threads.flatMap((t) => t.sha256Fns))]
    if (sha256 > 0) line(`  ${label}, SHA-256 blocks`, `${fmt(sha256)} instructions/request of the above (${sha256Fns.join(', ')})`)
    return { perRequest, sha256, sha256Fns }
  } finally {
    await server.stop()
    if (!KEEP) rmSync(dir, { recursive: true, force: true })
  }
}

/**
 * valgrind does not emulate the CPU's SHA extensions (SHA-NI), so under callgrind OpenSSL hashes
 * the signature's body with its software path (the SHA-256 block functions the dump names), and
 * the count holds instructions that a native run on such a CPU does not execute. Measured
 * natively, not hidden: the CPU time of one 64-byte block with the extensions against the same
 * hash with them masked (`OPENSSL_ia32cap`, OpenSSL's own switch; it then takes the software
 * path valgrind makes it take), each as the time of hashing the bench's body minus that of an
 * empty input (one block) over the blocks between, in alternating rounds. Resolves to the
 * median ratio and the two per-block times, or undefined when the CPU has no SHA extensions
 * (then the count is already the native path).
 */
async function nativeSha256Ratio(bytes) {
  const flags = /^flags\s*:(.*)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1] ?? ''
  if (!flags.split(/\s+/).includes('sha_ni')) return undefined
  const script = `
import { hash } from 'node:crypto'
const body = Buffer.from(process.env.SHA_BODY, 'latin1')
const n = 100000
const time = (b) => {
  for (let i = 0; i < n / 10; i++) hash('sha256', b, 'hex')
  const t = process.cpuUsage()
  for (let i = 0; i < n; i++) hash('sha256', b, 'hex')
  const d = process.cpuUsage(t)
  return ((d.user + d.system) * 1000) / n
}
process.stdout.write(JSON.stringify({ body: time(body), empty: time(Buffer.alloc(0)) }))`
  const blocks = Math.floor((bytes.length + 8) / 64) + 1 // with SHA-256's padding; the empty input is one block
  const perBlock = (masked) => {
    const env = { ...process.env, SHA_BODY: bytes.toString('latin1') }
    if (masked) env.OPENSSL_ia32cap = ':~0x20000000' // CPUID(7).EBX bit 29: the SHA extensions
    else delete env.OPENSSL_ia32cap
    const { body, empty } = JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script], { env, encoding: 'utf8' }))
    return (body - empty) / (blocks - 1)
  }
  const ratios = []
  const ni = []
  const sw = []
  for (let round = 0; round < 7; round++) {
    const a = perBlock(false)
    const b = perBlock(true)
    ni.push(a)
    sw.push(b)
    ratios.push(a / b)
  }
  const median = (xs) => [...xs].sort((x, y) => x - y)[xs.length >> 1]
  return { ratio: median(ratios), ni: median(ni), sw: median(sw), blocks }
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
const signed = Buffer.from(completionBody(36 ** 3)) // what the 201's signature hashes: the bench's body, with a transactionId of 4 characters
const sha = Object.values(results).some((r) => r.sha256 > 0) ? await nativeSha256Ratio(signed) : undefined
/** Instructions per request with the counted SHA-256 software path scaled to its native cost (an estimate). */
const native = (r) => r.perRequest - r.sha256 * (1 - sha.ratio)
if (sha) {
  process.stdout.write('\n')
  line(
    'SHA-256 natively, per 64-byte block',
    `${fmt(sha.ni, 1)} ns with the CPU's SHA extensions, ${fmt(sha.sw, 1)} ns with OpenSSL's software path: ${fmt(sha.ratio, 2)} of it (median of 7 alternating rounds; ${sha.blocks} blocks per body)`,
  )
  for (const [name, r] of Object.entries(results))
    if (r.sha256 > 0)
      line(
        `${name}, SHA-256 at its native cost`,
        `${fmt(native(r))} instructions/request (estimate: the ${fmt(r.sha256)} counted in ${r.sha256Fns.join(', ')} scaled by ${fmt(sha.ratio, 2)})`,
      )
}
if (results.bare && results.meterd) {
  process.stdout.write('\n')
  const ratio = results.meterd.perRequest / results.bare.perRequest
  line('meterd / bare, instructions per request', `${fmt(ratio, 2)} (target ≤ ${TARGET}) ${check('CPU per request ≤ 2 × bare', ratio <= TARGET)}`)
  // Printed beside the count, never in its place: the target is checked on what was counted.
  if (sha) line('  with SHA-256 at its native cost', `${fmt(native(results.meterd) / native(results.bare), 2)} (estimate, see above)`)
  const miss = missed()
  line('cpu-per-request targets', miss.length ? `missed: ${miss.join(', ')}` : 'all met')
}
