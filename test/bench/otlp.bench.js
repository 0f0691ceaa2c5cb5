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
import { randomBytes } from 'node:crypto'
import { BENCH_SECONDS, check, cpuSeconds, fmt, freePort, header, line, ratioLine, spawnMeterd, spawnScript, stealMeter, PACKAGE_ROOT } from './lib.js'

const { ExportTraceServiceRequest, SERVICES } = await import('../../dist/src/transport/otlp/proto.js')
const grpc = await import('@grpc/grpc-js')
const { Pool } = await import('undici')

const SPANS = 100
const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS) || 2)
const POOL = 3000
const CONNECTIONS = 32

let seq = 0
/** One export: 100 spans, every tenth a GenAI chat span with a response id never used before. */
function exportBody() {
  const now = BigInt(Date.now()) * 1_000_000n
  const kv = (key, value) => ({ key, value })
  const spans = []
  for (let i = 0; i < SPANS; i++) {
    const attributes = [kv('http.request.method', { stringValue: 'POST' }), kv('http.route', { stringValue: '/api/answer' }), kv('http.response.status_code', { intValue: 200 }), kv('server.address', { stringValue: 'api.example.com' })]
    if (i % 10 === 0)
      attributes.push(
        kv('gen_ai.operation.name', { stringValue: 'chat' }),
        kv('gen_ai.provider.name', { stringValue: 'openai' }),
        kv('gen_ai.request.model', { stringValue: 'gpt-4o' }),
        kv('gen_ai.response.id', { stringValue: `chatcmpl-bench-${process.pid}-${seq++}` }),
        kv('gen_ai.usage.input_tokens', { intValue: 1200 }),
        kv('gen_ai.usage.output_tokens', { intValue: 300 }),
      )
    spans.push({ traceId: randomBytes(16), spanId: randomBytes(8), name: i % 10 === 0 ? 'chat gpt-4o' : 'POST /api/answer', kind: 3, startTimeUnixNano: String(now), endTimeUnixNano: String(now + 1_234_567n), attributes, status: { code: 1 } })
  }
  const msg = { resourceSpans: [{ resource: { attributes: [kv('service.name', { stringValue: 'bench' }), kv('revenium.organization.name', { stringValue: 'AcmeOrg' })] }, scopeSpans: [{ scope: { name: 'bench' }, spans }] }] }
  return Buffer.from(ExportTraceServiceRequest.encode(ExportTraceServiceRequest.fromObject(msg)).finish())
}

/** Fresh bodies for each round (a repeated response id would be answered from dedup, which is cheaper). */
const bodies = () => Array.from({ length: POOL }, exportBody)

// The bare servers decode with the same protos and answer an empty Export response.
const BARE_HTTP = `
  import { createServer } from 'node:http'
  const { ExportTraceServiceRequest } = await import(${JSON.stringify(PACKAGE_ROOT + '/dist/src/transport/otlp/proto.js')})
  createServer((req, res) => {
    const chunks = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      if (req.method === 'POST') ExportTraceServiceRequest.decode(Buffer.concat(chunks))
      res.writeHead(200, { 'content-type': 'application/x-protobuf', 'content-length': 0 })
      res.end()
    })
  }).listen(Number(process.env.PORT), '127.0.0.1')
`
const BARE_GRPC = `
  import { createServer } from 'node:http'
  import * as grpc from '@grpc/grpc-js'
  const { ExportTraceServiceRequest, SERVICES } = await import(${JSON.stringify(PACKAGE_ROOT + '/dist/src/transport/otlp/proto.js')})
  const id = (b) => b
  const server = new grpc.Server({ 'grpc.max_receive_message_length': 4 * 1024 * 1024 })
  server.addService({ Export: { path: '/' + SERVICES.traces + '/Export', requestStream: false, responseStream: false, requestSerialize: id, requestDeserialize: id, responseSerialize: id, responseDeserialize: id } }, {
    Export: (call, done) => { ExportTraceServiceRequest.decode(call.request); done(null, Buffer.alloc(0)) },
  })
  server.bindAsync('127.0.0.1:' + process.env.GRPC_PORT, grpc.ServerCredentials.createInsecure(), () => {
    createServer((_, res) => res.end('ok')).listen(Number(process.env.PORT), '127.0.0.1')
  })
`

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
