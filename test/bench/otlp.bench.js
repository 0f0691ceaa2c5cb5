/**
 * OTLP ingest benchmark (issue 16), end to end: exports of 100 spans, 10 of them GenAI chat spans
 * (each with a response id of its own, so every export stores 10 new usage records), sent as
 * protobuf over OTLP/HTTP and over OTLP/gRPC.
 *   - HTTP: meterd (/v2/otlp/v1/traces, default pipelines: genai → validate → attribution →
 *     pricing → lmdb, webhook) vs a bare node:http server that decodes the same bodies with
 *     protobufjs and answers. Target: spans/s ≥ 0.5 × bare.
 *   - gRPC: meterd's OTLP/gRPC listener vs a bare @grpc/grpc-js server that decodes and answers.
 *     Target: spans/s ≥ 0.5 × bare.
 *   - CPU: meterd's CPU seconds per span, as the share of one core 10,000 spans/s would take (the
 *     OpenTelemetry Collector publishes about 6 % for plain spans).
 * Each comparison alternates rounds of baseline and meterd (BENCH_ROUNDS, default 2) and reports
 * the best round of each; the load generator runs in this process, on the same two cores.
 * Run: `npm run bench -- otlp.bench` (BENCH_SECONDS=n per round).
 */
import { BARE_GRPC, BARE_HTTP, SPANS, exportMaker } from './otlp-load.js'
import { BENCH_SECONDS, check, cpuSeconds, fmt, freePort, header, line, ratioLine, spawnMeterd, spawnScript, stealMeter } from './lib.js'

const { SERVICES } = await import('../../dist/src/transport/otlp/proto.js')
const grpc = await import('@grpc/grpc-js')
const { Pool } = await import('undici')

const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS) || 2)
const POOL = 3000
const CONNECTIONS = 32


/** Fresh bodies for each round (a repeated response id would be answered from dedup, which is cheaper). */
const exportBody = exportMaker(`bench-${process.pid}`)
const bodies = () => Array.from({ length: POOL }, exportBody)


/** Closed-loop OTLP/HTTP load: CONNECTIONS requests in flight for `seconds`; resolves to exports answered 200 per second. */
async function httpLoad(url, key, pool, seconds) {
  const client = new Pool(url, { connections: CONNECTIONS })
  let i = 0
  let ok = 0
  let failed = 0
  const end = performance.now() + seconds * 1000
  const started = performance.now()
  await Promise.all(
    Array.from({ length: CONNECTIONS }, async () => {
      while (performance.now() < end) {
        const res = await client.request({ path: '/v2/otlp/v1/traces', method: 'POST', headers: { 'content-type': 'application/x-protobuf', 'x-api-key': key }, body: pool[i++ % pool.length] })
        await res.body.dump()
        if (res.statusCode === 200) ok++
        else failed++
      }
    }),
  )
  await client.close()
  return { rps: ok / ((performance.now() - started) / 1000), failed }
}

/** The same over gRPC, with one channel per connection. */
async function grpcLoad(port, key, pool, seconds) {
  const md = new grpc.Metadata()
  if (key) md.set('x-api-key', key)
  let i = 0
  let ok = 0
  let failed = 0
  const end = performance.now() + seconds * 1000
  const started = performance.now()
  const clients = Array.from({ length: CONNECTIONS / 4 }, () => new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure()))
  const id = (b) => b
  await Promise.all(
    Array.from({ length: CONNECTIONS }, async (_, c) => {
      const client = clients[c % clients.length]
      while (performance.now() < end) {
        const err = await new Promise((resolve) => client.makeUnaryRequest(`/${SERVICES.traces}/Export`, id, id, pool[i++ % pool.length], md, {}, (e) => resolve(e)))
        if (err) failed++
        else ok++
      }
    }),
  )
  for (const c of clients) c.close()
  return { rps: ok / ((performance.now() - started) / 1000), failed }
}

header('OTLP ingest: 100 spans per export (10 GenAI), protobuf, over HTTP and gRPC')
const steal = stealMeter()
const grpcPort = await freePort()
const meterd = await spawnMeterd({
  // The rate limit of 1,000 requests/s per account would cap the exports here, not the daemon.
  // The own OTLP/HTTP listener off in the config (an empty METERD_OTLP_HTTP_ENDPOINT means its default, 4318).
  config: { extensions: { ratelimit: { limits: { metering: 1_000_000 } } }, receivers: { otlp: { grpc: { endpoint: `127.0.0.1:${grpcPort}` }, http: { endpoint: '' } } } },
})
const bareGrpcPort = await freePort()
const bareHttp = await spawnScript(BARE_HTTP)
const bareGrpc = await spawnScript(BARE_GRPC, { env: { GRPC_PORT: String(bareGrpcPort) } })

const best = { httpBare: 0, httpMeterd: 0, grpcBare: 0, grpcMeterd: 0 }
let cpu = 0
let spansMeasured = 0
for (let r = 0; r < ROUNDS; r++) {
  const a = await httpLoad(bareHttp.url, '', bodies(), BENCH_SECONDS)
  const cpu0 = cpuSeconds(meterd.pid)
  const b = await httpLoad(meterd.url, meterd.key, bodies(), BENCH_SECONDS)
  cpu += cpuSeconds(meterd.pid) - cpu0
  spansMeasured += b.rps * BENCH_SECONDS * SPANS
  const c = await grpcLoad(bareGrpcPort, '', bodies(), BENCH_SECONDS)
  const cpu1 = cpuSeconds(meterd.pid)
  const d = await grpcLoad(grpcPort, meterd.key, bodies(), BENCH_SECONDS)
  cpu += cpuSeconds(meterd.pid) - cpu1
  spansMeasured += d.rps * BENCH_SECONDS * SPANS
  if (b.failed || d.failed) line(`round ${r + 1} failures`, `http ${b.failed}, grpc ${d.failed}`)
  line(`round ${r + 1} exports/s`, `http bare ${fmt(a.rps)} meterd ${fmt(b.rps)}; grpc bare ${fmt(c.rps)} meterd ${fmt(d.rps)}`)
  best.httpBare = Math.max(best.httpBare, a.rps)
  best.httpMeterd = Math.max(best.httpMeterd, b.rps)
  best.grpcBare = Math.max(best.grpcBare, c.rps)
  best.grpcMeterd = Math.max(best.grpcMeterd, d.rps)
}
line('OTLP/HTTP spans/s', `meterd ${fmt(best.httpMeterd * SPANS)}, bare ${fmt(best.httpBare * SPANS)}`)
process.stdout.write(ratioLine('OTLP/HTTP meterd / bare', best.httpMeterd, best.httpBare, 0.5) + '\n')
line('OTLP/gRPC spans/s', `meterd ${fmt(best.grpcMeterd * SPANS)}, bare ${fmt(best.grpcBare * SPANS)}`)
process.stdout.write(ratioLine('OTLP/gRPC meterd / bare', best.grpcMeterd, best.grpcBare, 0.5) + '\n')
const perSpan = cpu / spansMeasured
line('meterd CPU per span', `${fmt(perSpan * 1e6, 1)} µs: ${fmt(perSpan * 10_000 * 100, 1)} % of a core at 10,000 spans/s (usage records: 1 in 10 spans)`)
line('steal during the run', `${fmt(steal(), 1)} %`)
const stored = await fetch(`${meterd.url}/profitstream/v2/api/sources/metrics/ai/completions?size=1`, { headers: { 'x-api-key': meterd.key } }).then((r) => r.json())
check('every GenAI span of an answered export was stored', stored.page.totalElements >= Math.floor(spansMeasured / 10) * 0.99)
await Promise.all([meterd.stop(), bareHttp.stop(), bareGrpc.stop()])
