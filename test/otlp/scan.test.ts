/**
 * Decoding only the spans the genai connector reads (DecodeOptions.spans, what the otlp receiver
 * does when the connector is the traces pipelines' only consumer): the scan of the raw protobuf
 * must change nothing a client can see. The same request decoded whole and filtered afterwards
 * is the reference — items, their places among the accepted spans, rejections, keys, and the
 * 400 of a malformed body — for well-formed requests, every truncation of one, and corrupted
 * bytes; and the connector's records and refusals are the same with plain spans among the
 * usage spans.
 */
import protobuf from 'protobufjs'
import t from 'tap'
import { ApiError } from '../../src/core/errors.js'
import { fanout } from '../../src/core/fanout.js'
import { SPAN_USAGE_PREFIXES } from '../../src/connectors/genai/spans.js'
import type { DecodedTraces } from '../../src/transport/otlp/batch.js'
import { decodeTracesProto } from '../../src/transport/otlp/decode-proto.js'
import { scanTraces } from '../../src/transport/otlp/scan-traces.js'
import { genaiHarness } from '../helpers/genai.js'
import { encodeSpans, fixture, FIXTURES, jsonSpans, protoOf, sdkSpans } from '../helpers/otlp.js'
import { readdirSync } from 'node:fs'
import { isDeepStrictEqual } from 'node:util'

const SPANS = { attributePrefixes: SPAN_USAGE_PREFIXES }
const PREFIX_BYTES = SPAN_USAGE_PREFIXES.map((p) => Buffer.from(p))
const KEYS = { apiKeyAttributes: ['service.api_key', 'revenium.api_key'] }

/** The reference: the whole request decoded, then the spans with a key under a prefix (on the span or its resource) kept. */
function reference(buf: Uint8Array): DecodedTraces | ApiError {
  let all: DecodedTraces
  try {
    all = decodeTracesProto(buf, KEYS)
  } catch (err) {
    return err as ApiError
  }
  const reads = (attrs: Record<string, unknown>): boolean => Object.keys(attrs).some((k) => SPAN_USAGE_PREFIXES.some((p) => k.startsWith(p)))
  // The resource is compared as decoded: the api-key attributes are gone from it, and none is under a usage prefix here.
  const positions: number[] = []
  all.items.forEach((it, i) => {
    if (reads(it.resource.attributes) || reads(it.span.attributes)) positions.push(i)
  })
  return { ...all, items: positions.map((i) => all.items[i]), positions }
}

function readOnly(buf: Uint8Array): DecodedTraces | ApiError {
  try {
    return decodeTracesProto(buf, { ...KEYS, spans: SPANS })
  } catch (err) {
    return err as ApiError
  }
}

const plain = (i: number): Record<string, unknown> => ({
  traceId: (10 + i).toString(16).padStart(2, '0').repeat(16),
  spanId: (10 + i).toString(16).padStart(2, '0').repeat(8),
  name: `GET /items/${i} — “ünïcode”`,
  kind: 2,
  startTimeUnixNano: '1795305494866000000',
  endTimeUnixNano: '1795305494866122460',
  attributes: [
    { key: 'http.request.method', value: { stringValue: 'GET' } },
    { key: 'http.response.status_code', value: { intValue: '200' } },
    { key: 'aí.not.a.prefix', value: { doubleValue: 1.5 } },
    { key: 'nested', value: { kvlistValue: { values: [{ key: 'gen_ai.inside', value: { arrayValue: { values: [{ boolValue: true }, { bytesValue: Buffer.from([1, 2]) }] } } }] } } },
  ],
  status: { code: 1, message: 'ok' },
})

const genai = (i: number, extra: Record<string, unknown>[] = []): Record<string, unknown> => ({
  traceId: 'e0'.repeat(16),
  spanId: (0x20 + i).toString(16).repeat(8),
  name: 'chat gpt-4o',
  startTimeUnixNano: '1795305494000000000',
  endTimeUnixNano: '1795305495000000000',
  attributes: [
    { key: 'gen_ai.operation.name', value: { stringValue: 'chat' } },
    { key: 'gen_ai.request.model', value: { stringValue: 'gpt-4o' } },
    { key: 'gen_ai.usage.input_tokens', value: { intValue: '7' } },
    { key: 'gen_ai.usage.output_tokens', value: { intValue: '3' } },
    ...extra,
  ],
})

/** Every shape of request the scan must treat as protobufjs does: plain spans among usage spans, bad ids, a resource that makes every span read. */
function requests(): [string, Uint8Array][] {
  const mixed = jsonSpans([plain(0), genai(1), plain(2), { ...plain(3), spanId: 'abcd' }, genai(4, [{ key: 'gen_ai.usage.input_tokens', value: { intValue: '-3' } }]), { ...plain(5), traceId: '00'.repeat(16) }, plain(6)], [
    { key: 'service.name', value: { stringValue: 'svc' } },
    { key: 'revenium.api_key', value: { stringValue: 'hak_from_the_body' } },
  ])
  const resourceRead = jsonSpans([plain(0), plain(1)], [{ key: 'gen_ai.system', value: { stringValue: 'openai' } }])
  const twoResources = { resourceSpans: [...(mixed as any).resourceSpans, ...(resourceRead as any).resourceSpans, { scopeSpans: [{ spans: [plain(7)] }] }] }
  return [
    ['plain and usage spans, bad ids, a key in the resource', protoOf('traces', mixed)],
    ['a resource with a usage attribute', protoOf('traces', resourceRead)],
    ['three resources, one without resource or scope', protoOf('traces', twoResources)],
    ['empty', new Uint8Array(0)],
  ]
}

function same(t: Tap.Test, got: DecodedTraces | ApiError, want: DecodedTraces | ApiError, what: string): void {
  if (want instanceof Error || got instanceof Error) {
    t.ok(got instanceof ApiError && want instanceof ApiError, `${what}: both refuse the body`)
    if (got instanceof ApiError && want instanceof ApiError) t.same([got.status, got.code, got.message], [want.status, want.code, want.message], `${what}: the same 400`)
    return
  }
  t.same(got, want, what)
}

t.test('the scan vouches for well-formed requests, and decoding only the spans read gives the reference', async (t) => {
  const sdk = await sdkSpans({ 'service.name': 'demo', 'revenium.api_key': 'hak_x' }, (tracer) => {
    tracer.startSpan('GET /', { attributes: { 'http.route': '/', 'list.attr': ['a', 'b'] } }).end()
    tracer.startSpan('chat gpt-4o', { attributes: { 'gen_ai.operation.name': 'chat', 'gen_ai.usage.input_tokens': 12 } }).end()
    tracer.startSpan('ai.generateText.doGenerate', { attributes: { 'ai.operationId': 'ai.generateText.doGenerate', 'ai.model.id': 'gpt-4o' } }).end()
    const withEvent = tracer.startSpan('db query', { attributes: { 'db.system': 'postgresql' } })
    withEvent.addEvent('an event the protos do not declare', { 'k': 'v' })
    withEvent.end()
  })
  for (const [name, buf] of [...requests(), ['spans from the real SDK exporter', encodeSpans(sdk).proto] as [string, Uint8Array]]) {
    t.ok(scanTraces(buf, PREFIX_BYTES), `${name}: the scan follows it`)
    same(t, readOnly(buf), reference(buf), name)
  }
  const sdkRead = readOnly(encodeSpans(sdk).proto) as DecodedTraces
  t.same(sdkRead.items.map((it) => it.span.name), ['chat gpt-4o', 'ai.generateText.doGenerate'], 'only the usage spans became items')
  t.equal(sdkRead.accepted, 4, 'every span is counted')
  t.same(sdkRead.apiKeys, ['hak_x'], 'the key in the resource is found')
})

t.test('every truncation and many corruptions of a request: the same items, or the same 400', async (t) => {
  for (const [name, buf] of requests().slice(0, 3)) {
    let mismatches = 0
    const check = (b: Uint8Array, what: string): void => {
      const got = readOnly(b)
      const want = reference(b)
      const ok = want instanceof Error ? got instanceof ApiError && got.message === want.message : !(got instanceof Error) && isDeepStrictEqual(got, want)
      if (!ok && mismatches++ < 3) same(t, got, want, `${name}: ${what}`)
    }
    for (let n = 0; n < buf.length; n++) check(buf.subarray(0, n), `the first ${n} bytes`)
    // Each byte set to values that change a tag, a length or a string: 0x00, 0x80 (a varint goes on), 0xff, +1.
    for (let i = 0; i < buf.length; i++)
      for (const v of [0x00, 0x80, 0xff, (buf[i] + 1) & 0xff]) {
        const b = Buffer.from(buf)
        b[i] = v
        check(b, `byte ${i} set to ${v}`)
      }
    t.equal(mismatches, 0, `${name}: ${buf.length * 5} variants, none differs from decoding the whole request`)
  }
})

t.test('what the scan does not follow is decoded whole by protobufjs, with the same result', async (t) => {
  const base = requests()[0][1]
  const w = protobuf.Writer.create()
  // A span carrying a group (wire type 3) protobufjs skips, a field number past 2^25, and the scope given twice.
  const span = protobuf.Writer.create().uint32((1 << 3) | 2).bytes(Buffer.alloc(16, 0xab)).uint32((2 << 3) | 2).bytes(Buffer.alloc(8, 0xcd))
  span.uint32((20 << 3) | 3).uint32((1 << 3) | 0).uint32(5).uint32((20 << 3) | 4)
  span.uint32((9 << 3) | 2).fork().uint32((1 << 3) | 2).string('gen_ai.operation.name').uint32((2 << 3) | 2).fork().uint32((1 << 3) | 2).string('chat').ldelim().ldelim()
  const scope = protobuf.Writer.create().uint32((1 << 3) | 2).string('s').finish()
  const scopeSpans = protobuf.Writer.create().uint32((1 << 3) | 2).bytes(scope).uint32((1 << 3) | 2).bytes(scope).uint32((2 << 3) | 2).bytes(span.finish()).finish()
  const rs = protobuf.Writer.create().uint32((2 << 3) | 2).bytes(scopeSpans).finish()
  w.uint32((1 << 3) | 2).bytes(rs)
  const odd = Buffer.concat([base, w.finish(), Buffer.from([0xf8, 0xff, 0xff, 0xff, 0x0f, 0x01])]) // and an unknown varint field 2^28 - 1 at the end
  t.notOk(scanTraces(odd, PREFIX_BYTES), 'the scan gives up')
  const got = readOnly(odd) as DecodedTraces
  t.same(got, reference(odd), 'decoded whole, then filtered: the same')
  t.equal(got.items.length, 3, 'the usage spans of both resources')

  // Deeply nested values in a plain span: beyond the scan's depth, within protobufjs's limit.
  let deep: Record<string, unknown> = { stringValue: 'leaf' }
  for (let i = 0; i < 40; i++) deep = { arrayValue: { values: [deep] } }
  const nested = protoOf('traces', jsonSpans([{ ...plain(0), attributes: [{ key: 'deep', value: deep }] }, genai(1)]))
  t.notOk(scanTraces(nested, PREFIX_BYTES), 'the scan gives up on deep nesting')
  t.same(readOnly(nested), reference(nested), 'the same items')
})

t.test('the genai connector makes the same records and refusals from the spans it reads, with plain spans among them', async (t) => {
  const h = await genaiHarness(t)
  const interleave = (json: any): any => {
    let n = 0
    for (const rs of json.resourceSpans ?? [])
      for (const ss of rs.scopeSpans ?? []) ss.spans = (ss.spans ?? []).flatMap((s: unknown) => [plain(n++), s, plain(n++)])
    return json
  }
  const traces = readdirSync(FIXTURES).filter((f) => f.startsWith('traces') && f.endsWith('.json'))
  t.ok(traces.length >= 7, 'the trace fixtures are there')
  for (const name of traces) {
    const whole = await h.run('traces', interleave(fixture(name)), { encoding: 'protobuf' })
    const read = await h.run('traces', interleave(fixture(name)), { encoding: 'protobuf', readOnly: true })
    t.same({ records: read.records, rejected: read.rejected, error: read.error?.message }, { records: whole.records, rejected: whole.rejected, error: whole.error?.message }, name)
  }
  // Every usage span refused, beside plain spans: the plain spans stand (a partial success, not a 400).
  const bad = jsonSpans([plain(0), genai(1, [{ key: 'gen_ai.usage.output_tokens', value: { intValue: '-1' } }]), plain(2)])
  const read = await h.run('traces', bad, { encoding: 'protobuf', readOnly: true })
  t.equal(read.error, undefined, 'the batch stands')
  t.same(read.rejected, [{ index: 1, message: 'gen_ai.usage.output_tokens must be a non-negative integer, got -1' }], 'refused under its place among all the spans')
  const onlyBad = await h.run('traces', jsonSpans([genai(1, [{ key: 'gen_ai.usage.output_tokens', value: { intValue: '-1' } }])]), { encoding: 'protobuf', readOnly: true })
  t.match(onlyBad.error?.message, /^item 0: /, 'a batch of nothing but refused spans is still refused')
})

t.test('a pipeline fan-out reads the spans one of its branches reads; all of them when a branch reads every span', async (t) => {
  const reader = (prefixes?: string[]) => ({ consume: async () => {}, spanInterest: prefixes && { attributePrefixes: prefixes } })
  t.same(fanout([{ id: 'a', consumer: reader(['gen_ai.']), mutatesData: false }]).spanInterest, { attributePrefixes: ['gen_ai.'] })
  t.same(fanout([{ id: 'a', consumer: reader(['gen_ai.']), mutatesData: false }, { id: 'b', consumer: reader(['llm.', 'gen_ai.']), mutatesData: false }]).spanInterest, { attributePrefixes: ['gen_ai.', 'llm.'] })
  t.equal(fanout([{ id: 'a', consumer: reader(['gen_ai.']), mutatesData: false }, { id: 'debug', consumer: reader(), mutatesData: false }]).spanInterest, undefined)
})
