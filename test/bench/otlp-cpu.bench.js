/**
 * CPU per OTLP export, counted rather than timed (issue 16's "where the time goes", for A/B on
 * a shared machine): the exports of otlp.bench.js (100 spans, 10 of them GenAI chat spans with
 * response ids never used before, so each export stores ten usage records durably) sent to
 * meterd and to the bare servers of otlp.bench.js, over OTLP/HTTP and OTLP/gRPC, each server
 * under `valgrind --tool=callgrind`, which counts the instructions every thread executes.
 *
 * For each server: start it with instrumentation off, send WARMUP exports (V8 compiles the hot
 * path), turn instrumentation on and send WARMUP / 4 more, zero the counters, send exactly
 * EXPORTS exports with CONNECTIONS in flight, and dump. Instructions per export = the dump's
 * total over every thread (main, lmdb-js's writer, libuv's pool, V8's GC helpers) / EXPORTS,
 * without V8's optimizing compiler finishing the warm-up's work. Instructions leave out cache
 * misses and stalls: otlp.bench.js measures the throughput the targets are about.
 *
 * The ratio printed is bare / meterd, to set beside the throughput targets (≥ 0.5): when both
 * servers are bound by their CPU, spans/s scale with the inverse of the instructions per export.
 *
 * Needs valgrind; without it the bench says so and exits 0. Env: OTLP_CPU_EXPORTS (default
 * 600), OTLP_CPU_WARMUP (default 2000), OTLP_CPU_CONNECTIONS (default 32),
 * OTLP_CPU_ONLY=http|grpc, OTLP_CPU_KEEP=1 keeps the dumps (for callgrind_annotate; with
 * OTLP_CPU_NODE_ARGS=--perf-basic-prof, /tmp/perf-<pid>.map names the JIT code in them).
 * Run: `npm run bench -- otlp-cpu`.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { control, lastDump, requireCallgrind } from './callgrind.js'
import { BARE_GRPC, BARE_HTTP, SPANS, exportMaker } from './otlp-load.js'
import { fmt, freePort, header, line, spawnMeterd, spawnScript } from './lib.js'

const EXPORTS = Math.max(50, Number(process.env.OTLP_CPU_EXPORTS) || 600)
const WARMUP = Math.max(50, Number(process.env.OTLP_CPU_WARMUP) || 2000)
const CONNECTIONS = Math.max(1, Number(process.env.OTLP_CPU_CONNECTIONS) || 32)
const ONLY = process.env.OTLP_CPU_ONLY
const KEEP = Boolean(process.env.OTLP_CPU_KEEP)
const NODE_ARGS = ['--min-semi-space-size=16', '--max-semi-space-size=16', ...(process.env.OTLP_CPU_NODE_ARGS ?? '').split(' ').filter(Boolean)]

requireCallgrind('otlp-cpu')

const { SERVICES } = await import('../../dist/src/transport/otlp/proto.js')
const grpc = await import('@grpc/grpc-js')
const { Pool } = await import('undici')

const exportBody = exportMaker(`cpu-${process.pid.toString(36)}-${Date.now().toString(36)}`)



/** Sends `count` exports with CONNECTIONS in flight; throws on a failed one. */
async function load(target, key, count) {
  const bodies = Array.from({ length: Math.min(count, 500) }, exportBody)
  let sent = 0
  if (target.grpcPort) {
    const md = new grpc.Metadata()
    if (key) md.set('x-api-key', key)
    const clients = Array.from({ length: Math.max(1, CONNECTIONS / 4) }, () => new grpc.Client(`127.0.0.1:${target.grpcPort}`, grpc.credentials.createInsecure()))
    const id = (b) => b
    try {
      await Promise.all(
        Array.from({ length: CONNECTIONS }, async (_, c) => {
          while (sent < count) {
            const body = sent < bodies.length ? bodies[sent] : exportBody()
            sent++
            const err = await new Promise((resolve) => clients[c % clients.length].makeUnaryRequest(`/${SERVICES.traces}/Export`, id, id, body, md, { deadline: Date.now() + 600_000 }, (e) => resolve(e)))
            if (err) throw err
          }
        }),
      )
    } finally {
      for (const c of clients) c.close()
    }
    return
  }
  const client = new Pool(target.url, { connections: CONNECTIONS, headersTimeout: 600_000, bodyTimeout: 600_000 })
  try {
    await Promise.all(
      Array.from({ length: CONNECTIONS }, async () => {
        while (sent < count) {
          const body = sent < bodies.length ? bodies[sent] : exportBody()
          sent++
          const res = await client.request({ path: '/v2/otlp/v1/traces', method: 'POST', headers: { 'content-type': 'application/x-protobuf', 'x-api-key': key }, body })
          await res.body.dump()
          if (res.statusCode !== 200) throw new Error(`an export was answered ${res.statusCode}`)
        }
      }),
    )
  } finally {
    await client.close()
  }
}

/** Instructions per export of a server that `start({ wrapper, nodeArgs })` starts; `target(server)` says where to send. */
async function measure(label, start, target) {
  const dir = mkdtempSync(join(tmpdir(), 'meterd-otlp-callgrind-'))
  const wrapper = ['valgrind', '--tool=callgrind', '--instr-atstart=no', '--separate-threads=yes', `--callgrind-out-file=${join(dir, 'cg.%p')}`]
  const t0 = Date.now()
  const server = await start({ wrapper, nodeArgs: NODE_ARGS, readyTimeoutMs: 180_000 })
  const to = target(server)
  try {
    await load(to, server.key, WARMUP)
    await control(server.pid, '--instr=on')
    await load(to, server.key, Math.ceil(WARMUP / 4))
    await control(server.pid, '--zero')
    await load(to, server.key, EXPORTS)
    await control(server.pid, '--dump')
    const threads = lastDump(dir, server.pid)
    const total = threads.reduce((a, t) => a + t.ir, 0)
    const compiling = threads.reduce((a, t) => a + t.compiling, 0)
    const main = threads.find((t) => t.thread === 1) ?? { ir: 0, compiling: 0 }
    const perExport = (total - compiling) / EXPORTS
    line(label, `${fmt(perExport)} instructions/export (main thread ${fmt((main.ir - main.compiling) / EXPORTS)}; ${fmt((Date.now() - t0) / 1000)} s under callgrind)`)
    if (KEEP) line(`  ${label}, dumps`, threads.map((t) => t.file).join(' '))
    return perExport
  } finally {
    await server.stop()
    if (!KEEP) rmSync(dir, { recursive: true, force: true })
  }
}

header(`otlp-cpu: ${SPANS} spans per export (10 GenAI) under callgrind, ${EXPORTS} exports after ${WARMUP} warm-up, ${CONNECTIONS} in flight`)
const meterdConfig = async (spawn, grpcPort) =>
  spawnMeterd({
    ...spawn,
    // The own OTLP/HTTP listener off in the config (an empty METERD_OTLP_HTTP_ENDPOINT means its default, 4318).
    config: { extensions: { ratelimit: { limits: { metering: 1_000_000 } } }, receivers: { otlp: { grpc: { endpoint: grpcPort ? `127.0.0.1:${grpcPort}` : '' }, http: { endpoint: '' } } } },
  })
for (const transport of ['http', 'grpc']) {
  if (ONLY && ONLY !== transport) continue
  let bare
  let meterd
  if (transport === 'http') {
    bare = await measure('OTLP/HTTP bare node:http + protobufjs', (spawn) => spawnScript(BARE_HTTP, spawn), (s) => ({ url: s.url }))
    meterd = await measure('OTLP/HTTP meterd', (spawn) => meterdConfig(spawn), (s) => ({ url: s.url }))
  } else {
    const bareGrpcPort = await freePort()
    bare = await measure('OTLP/gRPC bare grpc-js + protobufjs', (spawn) => spawnScript(BARE_GRPC, { ...spawn, env: { GRPC_PORT: String(bareGrpcPort) } }), () => ({ grpcPort: bareGrpcPort }))
    const grpcPort = await freePort()
    meterd = await measure('OTLP/gRPC meterd', (spawn) => meterdConfig(spawn, grpcPort), () => ({ grpcPort }))
  }
  line(`OTLP/${transport === 'http' ? 'HTTP' : 'gRPC'} bare / meterd instructions`, fmt(bare / meterd, 2))
}
