/**
 * OTLP decoding benchmark (issue 16): where the time of turning an export into usage goes, in
 * one process, on the request the OTLP benches use — 100 spans, 10 of them GenAI chat spans.
 * Each figure is spans per second, next to its baseline measured in the same run (median of
 * paired rounds, baseline and candidate alternating, so VM drift mostly cancels):
 *   - protobuf: bare protobufjs `ExportTraceServiceRequest.decode` (meterd's protos) vs
 *     decodeTracesProto (the same decode, then one item per span with plain attribute values);
 *     target: items ≥ 0.4 × bare decode; and beside it, decoding only the spans the genai
 *     connector reads (DecodeOptions.spans, what the receiver does in the default pipelines).
 *   - OTLP/JSON: bare `JSON.parse` vs JSON.parse + decodeTracesJson.
 *   - the genai connector's mapping of the decoded items (10 records), beside decodeTracesProto.
 * No daemon, no HTTP: the end-to-end OTLP benches come with the receiver.
 * Run: `npm run bench -- otlp` (BENCH_PAIRS=n, BENCH_ROUND_MS=n change the rounds).
 */
import { randomBytes } from 'node:crypto'
import { header, line, median, missed, ratioLine, fmt, stealMeter } from './lib.js'

const { ExportTraceServiceRequest } = await import('../../dist/src/transport/otlp/proto.js')
const { decodeTracesProto } = await import('../../dist/src/transport/otlp/decode-proto.js')
const { decodeTracesJson } = await import('../../dist/src/transport/otlp/decode-json.js')
const { mapSpan, SPAN_USAGE_PREFIXES } = await import('../../dist/src/connectors/genai/spans.js')
const { CONTENT_ATTRIBUTES } = await import('../../dist/src/connectors/genai/descriptor.js')

const PAIRS = Math.max(1, Number(process.env.BENCH_PAIRS) || 6)
const ROUND_MS = Math.max(100, Number(process.env.BENCH_ROUND_MS) || 700)
const SPANS = 100

const kv = (key, value) => ({ key, value })
const now = BigInt(Date.parse('2026-11-21T23:58:14.866Z')) * 1_000_000n
const spans = []
for (let i = 0; i < SPANS; i++) {
  const attributes = [
    kv('http.request.method', { stringValue: 'POST' }),
    kv('http.route', { stringValue: '/api/answer' }),
    kv('http.response.status_code', { intValue: 200 }),
    kv('server.address', { stringValue: 'api.example.com' }),
    kv('db.system', { stringValue: 'postgresql' }),
  ]
  if (i % 10 === 0)
    attributes.push(
      kv('gen_ai.operation.name', { stringValue: 'chat' }),
      kv('gen_ai.provider.name', { stringValue: 'openai' }),
      kv('gen_ai.request.model', { stringValue: 'gpt-4o' }),
      kv('gen_ai.response.id', { stringValue: `chatcmpl-${i}` }),
      kv('gen_ai.usage.input_tokens', { intValue: 1200 }),
      kv('gen_ai.usage.output_tokens', { intValue: 300 }),
      kv('gen_ai.usage.cache_read.input_tokens', { intValue: 800 }),
      kv('gen_ai.response.finish_reasons', { arrayValue: { values: [{ stringValue: 'stop' }] } }),
    )
  spans.push({
    traceId: randomBytes(16),
    spanId: randomBytes(8),
    parentSpanId: randomBytes(8),
    name: i % 10 === 0 ? 'chat gpt-4o' : `POST /api/answer ${i}`,
    kind: 3,
    startTimeUnixNano: String(now + BigInt(i) * 1000n),
    endTimeUnixNano: String(now + BigInt(i) * 1000n + 1_234_567n),
    attributes,
    status: { code: 1 },
  })
}
const resource = { attributes: [kv('service.name', { stringValue: 'answer-api' }), kv('revenium.organization.name', { stringValue: 'AcmeOrg' })] }
const request = { resourceSpans: [{ resource, scopeSpans: [{ scope: { name: 'bench', version: '1' }, spans }] }] }
const proto = ExportTraceServiceRequest.encode(ExportTraceServiceRequest.fromObject(request)).finish()
const hex = (b) => Buffer.from(b).toString('hex')
const jsonText = JSON.stringify({
  resourceSpans: [{ resource, scopeSpans: [{ scope: { name: 'bench', version: '1' }, spans: spans.map((s) => ({ ...s, traceId: hex(s.traceId), spanId: hex(s.spanId), parentSpanId: hex(s.parentSpanId) })) }] }],
})

const settings = { prefixes: ['service.', 'revenium.'], drop: CONTENT_ATTRIBUTES, apiKeys: ['service.api_key', 'revenium.api_key'], isRegisteredTool: () => false }
const decodedOnce = decodeTracesProto(proto)
if (decodedOnce.items.length !== SPANS || decodedOnce.items.map((it) => mapSpan(it, settings)).filter(Boolean).length !== SPANS / 10)
  throw new Error('the bench request does not decode to 100 spans and 10 records')

/** Spans per second of `fn` (one call = one request of SPANS spans) over about ROUND_MS. */
function rate(fn) {
  const start = process.hrtime.bigint()
  const until = start + BigInt(ROUND_MS) * 1_000_000n
  let calls = 0
  let t = start
  while (t < until) {
    for (let i = 0; i < 20; i++) fn()
    calls += 20
    t = process.hrtime.bigint()
  }
  return (calls * SPANS) / (Number(t - start) / 1e9)
}

/** Median over PAIRS of (baseline, candidate) rounds, alternating which goes first. */
function paired(base, candidate) {
  for (let i = 0; i < 200; i++) (base(), candidate()) // warm up both
  const b = []
  const c = []
  for (let p = 0; p < PAIRS; p++) {
    if (p % 2 === 0) (b.push(rate(base)), c.push(rate(candidate)))
    else (c.push(rate(candidate)), b.push(rate(base)))
  }
  return { base: median(b), candidate: median(c) }
}

header(`OTLP decoding: ${SPANS} spans per request (${SPANS / 10} GenAI), ${proto.length} bytes protobuf, ${jsonText.length} bytes JSON`)

const steal = stealMeter()
const p = paired(() => ExportTraceServiceRequest.decode(proto), () => decodeTracesProto(proto))
line('protobuf: bare decode', `${fmt(p.base)} spans/s`)
line('protobuf: decode to items', `${fmt(p.candidate)} spans/s`)
process.stdout.write(ratioLine('items / bare decode (protobuf)', p.candidate, p.base, 0.4) + '\n')

// What the otlp receiver does when the genai connector is the traces pipelines' only consumer:
// the request scanned on its bytes, only the spans the connector reads (10 here) decoded.
const read = { spans: { attributePrefixes: SPAN_USAGE_PREFIXES } }
if (decodeTracesProto(proto, read).items.length !== SPANS / 10) throw new Error('the bench request does not hold 10 spans the connector reads')
const r = paired(() => ExportTraceServiceRequest.decode(proto), () => decodeTracesProto(proto, read))
line('protobuf: the spans genai reads', `${fmt(r.candidate)} spans/s (every span checked and counted, 10 decoded)`)
line('read spans / bare decode', fmt(r.candidate / r.base, 2))

const j = paired(() => JSON.parse(jsonText), () => decodeTracesJson(JSON.parse(jsonText)))
line('JSON: bare JSON.parse', `${fmt(j.base)} spans/s`)
line('JSON: parse + decode to items', `${fmt(j.candidate)} spans/s`)
line('items / bare parse (JSON)', fmt(j.candidate / j.base, 2))

const m = paired(() => decodeTracesProto(proto), () => {
  const d = decodeTracesProto(proto)
  for (const it of d.items) mapSpan(it, settings)
})
line('decode + genai mapping', `${fmt(m.candidate)} spans/s`)
line('(decode + mapping) / decode', fmt(m.candidate / m.base, 2))
line('mapping share of the two', `${fmt(100 * (1 - m.candidate / m.base), 0)} %`)

line('steal time over the rounds', `${fmt(steal(), 1)} %`)
if (missed().length) process.stdout.write(`missed: ${missed().join(', ')}\n`)
