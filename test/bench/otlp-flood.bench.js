/**
 * OTLP floods (task h78): one export of a million or two spans that the daemon refuses or passes
 * over — empty spans (2 bytes each: no ids, every one rejected), valid spans that are not GenAI
 * spans (ids only: counted, not decoded), the empty spans in OTLP/JSON, and as many empty log records
 * (valid: an item each; the same bytes as the empty spans' export). Each is sent once over
 * OTLP/HTTP and once over OTLP/gRPC to a spawned daemon; the figure is the request's time and
 * the longest wait of a /readyz poll sent every 5 ms meanwhile (how long the event loop was
 * held). Beside it, in this process, the bare protobufjs decode of the same bytes.
 * The body limits are raised to 64 MiB so the valid spans fit; the defaults are 4 MiB.
 * Run: `npm run bench -- flood` (FLOOD_COUNTS=1000000,2000000 changes the sizes).
 */
import { header, line, fmt, spawnMeterd, freePort } from './lib.js'

const { ExportTraceServiceRequest, SERVICES } = await import('../../dist/src/transport/otlp/proto.js')
const grpc = await import('@grpc/grpc-js')

const COUNTS = (process.env.FLOOD_COUNTS || '1000000,2000000').split(',').map(Number)
const MiB = 1024 * 1024

/** A protobuf length-delimited field: tag, varint length, bytes. */
function field(no, bytes) {
  const len = []
  let n = bytes.length
  while (n >= 128) {
    len.push((n & 127) | 128)
    n >>>= 7
  }
  len.push(n)
  return Buffer.concat([Buffer.from([(no << 3) | 2, ...len]), bytes])
}

/** One ExportTraceServiceRequest: one resource, one scope, `count` copies of the span `span` (its bytes). */
function traces(span, count) {
  const one = field(2, span)
  const spans = Buffer.alloc(one.length * count)
  for (let i = 0; i < count; i++) one.copy(spans, i * one.length)
  return field(1, field(2, spans))
}

const emptySpan = Buffer.alloc(0)
// trace_id (1) and span_id (2), nothing else: valid, and no gen_ai.* attribute.
const plainSpan = Buffer.concat([field(1, Buffer.alloc(16, 7)), field(2, Buffer.alloc(8, 9))])
const jsonEmpty = (count) => Buffer.from(`{"resourceSpans":[{"scopeSpans":[{"spans":[${'{},'.repeat(count - 1)}{}]}]}]}`)

/** Polls /readyz every 5 ms until stopped; the longest answer's time is how long the loop was held. */
function loopProbe(url) {
  let worst = 0
  let running = true
  const done = (async () => {
    while (running) {
      const t0 = performance.now()
      await fetch(url + '/readyz').then((r) => r.arrayBuffer())
      worst = Math.max(worst, performance.now() - t0)
      await new Promise((r) => setTimeout(r, 5))
    }
  })()
  return async () => {
    running = false
    await done
    return worst
  }
}

async function overHttp(url, key, body, type, signal = 'traces') {
  const stop = loopProbe(url)
  const t0 = performance.now()
  const res = await fetch(url + '/meter/v2/otlp/v1/' + signal, { method: 'POST', headers: { 'content-type': type, 'x-api-key': key }, body })
  const answer = Buffer.from(await res.arrayBuffer())
  const ms = performance.now() - t0
  return { ms, held: await stop(), status: res.status, answer }
}

async function overGrpc(url, port, key, body) {
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), { 'grpc.max_send_message_length': -1, 'grpc.max_receive_message_length': -1 })
  const md = new grpc.Metadata()
  md.set('x-api-key', key)
  await new Promise((r) => client.waitForReady(Date.now() + 5000, r))
  const stop = loopProbe(url)
  const t0 = performance.now()
  const { err, response } = await new Promise((resolve) =>
    client.makeUnaryRequest(`/${SERVICES.traces}/Export`, (b) => b, (b) => b, body, md, {}, (err, response) => resolve({ err, response })),
  )
  const ms = performance.now() - t0
  client.close()
  return { ms, held: await stop(), status: err ? `grpc ${err.code}` : 'OK', answer: response ?? Buffer.from(err.details ?? '') }
}

function bareDecode(body) {
  const t0 = performance.now()
  ExportTraceServiceRequest.decode(body)
  return performance.now() - t0
}

const summary = (r) => {
  const text = r.answer.toString('latin1')
  const count = /rejectedSpans"?:\s*(\d+)/.exec(text)?.[1]
  return `${fmt(r.ms)} ms, loop held ${fmt(r.held)} ms, ${r.status}${count ? `, rejectedSpans ${count}` : ''}, answer ${r.answer.length} B`
}

header('OTLP floods: one export of many spans meterd refuses or passes over')
const grpcPort = await freePort()
const meterd = await spawnMeterd({
  config: {
    extensions: { ratelimit: { limits: { metering: 1_000_000 } } },
    server: { max_body_bytes: 64 * MiB, max_body_bytes_in_flight: 256 * MiB },
    receivers: { otlp: { grpc: { endpoint: `127.0.0.1:${grpcPort}`, max_message_bytes: 64 * MiB }, http: { endpoint: '', max_request_bytes: 64 * MiB } } },
  },
})
try {
  for (const count of COUNTS) {
    const bodies = [
      ['empty spans, protobuf', traces(emptySpan, count), 'application/x-protobuf'],
      ['plain spans, protobuf', traces(plainSpan, count), 'application/x-protobuf'],
      ['empty spans, JSON', jsonEmpty(count), 'application/json'],
      // Not refused: an empty LogRecord is a valid one, an item each for the logs pipelines.
      ['empty log records, protobuf', traces(emptySpan, count), 'application/x-protobuf', 'logs'],
    ]
    for (const [what, body, type, signal = 'traces'] of bodies) {
      if (signal === 'logs') {
        line(`${count / 1e6}M ${what} (${fmt(body.length / MiB, 1)} MiB) HTTP`, summary(await overHttp(meterd.url, meterd.key, body, type, 'logs')))
        continue
      }
      const label = `${count / 1e6}M ${what} (${fmt(body.length / MiB, 1)} MiB)`
      if (type === 'application/x-protobuf') line(`${label} bare decode`, `${fmt(bareDecode(body))} ms`)
      line(`${label} HTTP`, summary(await overHttp(meterd.url, meterd.key, body, type)))
      if (type === 'application/x-protobuf') line(`${label} gRPC`, summary(await overGrpc(meterd.url, grpcPort, meterd.key, body)))
    }
  }
} finally {
  await meterd.stop()
}
