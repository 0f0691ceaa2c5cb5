/**
 * Floods of refused spans (docs/otlp.md, "Floods"): an export of a hundred thousand spans without
 * ids is answered with the exact count and a message naming the first few, and the decoder keeps
 * a bounded number of described refusals however many spans it refused — the work a refused
 * span costs is a count (the bound is checked here by what is kept, not by a clock).
 */
import { Metadata, status } from '@grpc/grpc-js'
import t from 'tap'
import type { OtlpReceiver } from '../../src/receivers/otlp/index.js'
import { REJECTIONS_DESCRIBED, REJECTIONS_SHOWN, itemPath } from '../../src/transport/otlp/batch.js'
import { decodeTracesJson } from '../../src/transport/otlp/decode-json.js'
import { decodeTracesProto } from '../../src/transport/otlp/decode-proto.js'
import { ExportTraceServiceResponse } from '../../src/transport/otlp/proto.js'
import { SPAN_USAGE_PREFIXES } from '../../src/connectors/genai/spans.js'
import { startMeterd } from '../helpers/meterd.js'
import { fixture, jsonSpans, protoOf } from '../helpers/otlp.js'
import { rawGrpcExport } from '../helpers/grpc.js'

const N = 100_000
const READS = { spans: { attributePrefixes: SPAN_USAGE_PREFIXES } }

/** protobuf field 2 (ScopeSpans.spans) holding an empty Span, `count` times, after the request `head`'s spans. */
function withEmptySpans(head: Uint8Array, count: number): Buffer {
  // Re-encode one resource and scope by hand: a request of the fixture's spans, then `count` `12 00`.
  const empties = Buffer.alloc(2 * count)
  for (let i = 0; i < count; i++) empties[2 * i] = 0x12
  const scopeSpans = Buffer.concat([scopeOf(head), empties])
  const resourceSpans = Buffer.concat([Buffer.from([0x12]), varint(scopeSpans.length), scopeSpans])
  return Buffer.concat([Buffer.from([0x0a]), varint(resourceSpans.length), resourceSpans])
}

/** The ScopeSpans' content of a request with one resource (no resource message) and one scope. */
function scopeOf(req: Uint8Array): Buffer {
  const b = Buffer.from(req)
  let p = 1
  p = skipVarint(b, p) // ResourceSpans length
  if (b[p] !== 0x12) throw new Error('expected ScopeSpans first')
  p = skipVarint(b, p + 1)
  return b.subarray(p)
}

function skipVarint(b: Buffer, p: number): number {
  while (b[p] >= 128) p++
  return p + 1
}

function varint(n: number): Buffer {
  const out: number[] = []
  while (n >= 128) {
    out.push((n & 127) | 128)
    n = Math.floor(n / 128)
  }
  out.push(n)
  return Buffer.from(out)
}

const genAiSpans = () => fixture('traces-genai-openai.json').resourceSpans[0].scopeSpans[0].spans as Record<string, unknown>[]

t.test('the decoders count every refused span and describe only the first REJECTIONS_DESCRIBED', async (t) => {
  const spans = genAiSpans()
  const proto = withEmptySpans(protoOf('traces', { resourceSpans: [{ scopeSpans: [{ spans }] }] }), N)
  const json = { resourceSpans: [{ scopeSpans: [{ spans: [...spans, ...Array.from({ length: N }, () => ({}))] }] }] }
  const runs = {
    'protobuf, the spans the connector reads (scanned)': decodeTracesProto(proto, READS),
    'protobuf, every span (protobufjs)': decodeTracesProto(proto),
    'OTLP/JSON': decodeTracesJson(json, READS),
  }
  for (const [name, d] of Object.entries(runs)) {
    t.equal(d.rejectedCount, N, `${name}: every empty span counted`)
    t.equal(d.rejected.length, REJECTIONS_DESCRIBED, `${name}: only the first ${REJECTIONS_DESCRIBED} described`)
    t.same(d.rejected[0], { path: `resourceSpans[0].scopeSpans[0].spans[${spans.length}]`, message: 'traceId is required' }, `${name}: the first named by its path`)
    t.equal(d.rejected.at(-1)!.path, `resourceSpans[0].scopeSpans[0].spans[${spans.length + REJECTIONS_DESCRIBED - 1}]`, `${name}: in order`)
    t.equal(d.accepted, spans.length, `${name}: the good spans stand`)
  }
})

t.test('a scanned span after refused ones keeps its place in the request', async (t) => {
  const good = genAiSpans()[0]
  const spans = [{ ...good, traceId: '' }, { ...good, spanId: 'abcd' }, good, { ...good, parentSpanId: '0000000000000000' }, good]
  const d = decodeTracesProto(protoOf('traces', jsonSpans(spans)), READS)
  t.same(
    d.rejected,
    [
      { path: 'resourceSpans[0].scopeSpans[0].spans[0]', message: 'traceId is required' },
      { path: 'resourceSpans[0].scopeSpans[0].spans[1]', message: 'spanId must be 8 bytes, got 2' },
      { path: 'resourceSpans[0].scopeSpans[0].spans[3]', message: 'parentSpanId must not be all zero' },
    ],
    'the ids are worded as idFromBytes words them',
  )
  t.equal(d.rejectedCount, 3)
  t.same([itemPath(d, 0), itemPath(d, 1)], ['resourceSpans[0].scopeSpans[0].spans[2]', 'resourceSpans[0].scopeSpans[0].spans[4]'], 'the accepted spans are named where they are')
  t.same(decodeTracesProto(protoOf('traces', jsonSpans(spans))).rejected, d.rejected, 'the same refusals when protobufjs decodes it whole')
})

t.test('a flood of empty spans beside GenAI spans: stored, counted exactly, a bounded message; all empty: a bounded 400', async (t) => {
  const m = await startMeterd(t)
  const otlp = m.service.component<OtlpReceiver>('receiver', 'otlp')!
  const key = await m.key()
  const spans = genAiSpans()
  const proto = withEmptySpans(protoOf('traces', { resourceSpans: [{ scopeSpans: [{ spans }] }] }), N)
  const json = Buffer.from(JSON.stringify({ resourceSpans: [{ scopeSpans: [{ spans: [...spans, ...Array.from({ length: N }, () => ({}))] }] }] }))
  const first = `resourceSpans[0].scopeSpans[0].spans[${spans.length}]: traceId is required`
  const wanted = new RegExp(`^${first.replace(/[[\]]/g, '\\$&')}(; [^;]+){${REJECTIONS_SHOWN - 1}}; and ${N - REJECTIONS_SHOWN} more$`)
  const url = `http://127.0.0.1:${otlp.ports.http}/v1/traces`

  const asProto = await fetch(url, { method: 'POST', body: proto, headers: { 'x-api-key': key, 'content-type': 'application/x-protobuf' } })
  t.equal(asProto.status, 200, 'protobuf over HTTP: the GenAI spans are taken')
  const p = ExportTraceServiceResponse.decode(new Uint8Array(await asProto.arrayBuffer())) as any
  t.equal(Number(p.partialSuccess.rejectedSpans), N, 'every empty span counted')
  t.match(p.partialSuccess.errorMessage, wanted, 'the first five named, the rest counted')

  const asJson = await fetch(url, { method: 'POST', body: json, headers: { 'x-api-key': key, 'content-type': 'application/json' } })
  const j = (await asJson.json()) as any
  t.equal(asJson.status, 200)
  t.equal(j.partialSuccess.rejectedSpans, N, 'OTLP/JSON: the same count')
  t.match(j.partialSuccess.errorMessage, wanted, 'and the same message')

  const md = new Metadata()
  md.set('x-api-key', key)
  const g = await rawGrpcExport(otlp.ports.grpc!, 'traces', proto, { metadata: md })
  t.notOk(g.err, 'gRPC: OK')
  const gr = ExportTraceServiceResponse.decode(g.response!) as any
  t.equal(Number(gr.partialSuccess.rejectedSpans), N, 'gRPC: the same count')
  t.match(gr.partialSuccess.errorMessage, wanted, 'gRPC: the same message')

  const onlyEmpty = withEmptySpans(protoOf('traces', { resourceSpans: [{ scopeSpans: [{}] }] }), 2 * N)
  const refused = await fetch(url, { method: 'POST', body: onlyEmpty, headers: { 'x-api-key': key, 'content-type': 'application/x-protobuf' } })
  t.equal(refused.status, 400, 'nothing but empty spans: 400')
  const all = await rawGrpcExport(otlp.ports.grpc!, 'traces', onlyEmpty, { metadata: md })
  t.equal(all.err?.code, status.INVALID_ARGUMENT, 'gRPC: INVALID_ARGUMENT')
  t.match(all.err?.details, /^invalid_otlp_items: every item of the export was refused: .*; and 199995 more$/, 'naming the first five and counting the rest')
  t.ok(all.err!.details.length < 600, `a message of bounded length (${all.err!.details.length} characters)`)
})
