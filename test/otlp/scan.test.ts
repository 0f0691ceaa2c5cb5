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
import { fanout } from '../../src/host/fanout.js'
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

/**
 * Usage spans written byte by byte with what readSpan (src/transport/otlp/read-span.ts) reads from
 * the bytes and what it leaves to protobufjs: every AnyValue member, members given twice, keys
 * given twice, `__proto__` and index-like keys, varints of several bytes, unknown fields of every
 * wire type, known fields with another wire type, a status or a value given twice (merged by
 * protobufjs), arrays and kvlists, negative and large integers, and times given twice.
 */
function oddSpans(): Uint8Array {
  const W = () => protobuf.Writer.create()
  const str = (field: number, v: string) => W().uint32((field << 3) | 2).string(v)
  const value = (build: (w: protobuf.Writer) => void): protobuf.Writer => {
    const w = W()
    build(w)
    return w
  }
  const raw = (bytes: number[]) => ({ finish: () => Uint8Array.from(bytes) }) as protobuf.Writer
  const kv = (key: string, any?: protobuf.Writer, extra?: (w: protobuf.Writer) => void): Uint8Array => {
    const w = W().uint32((1 << 3) | 2).string(key)
    if (any) w.uint32((2 << 3) | 2).bytes(any.finish())
    extra?.(w)
    return w.finish()
  }
  const span = (n: number, attrs: Uint8Array[], more?: (w: protobuf.Writer) => void): Uint8Array => {
    const w = W().uint32((1 << 3) | 2).bytes(Buffer.alloc(16, 0x40 + n)).uint32((2 << 3) | 2).bytes(Buffer.alloc(8, 0x40 + n))
    w.uint32((5 << 3) | 2).string(`span ${n} “ü”`).uint32((6 << 3) | 0).uint32(3)
    w.uint32((7 << 3) | 1).fixed64('1795305494000000000').uint32((8 << 3) | 1).fixed64('1795305495123456789')
    w.uint32((9 << 3) | 2).bytes(kv('gen_ai.operation.name', str(1, 'chat')))
    for (const a of attrs) w.uint32((9 << 3) | 2).bytes(a)
    more?.(w)
    return w.finish()
  }
  const S = (v: string) => str(1, v)
  const spans = [
    // Every scalar member; empty string and bytes; members given twice (the last counts); several members (anyValue's order decides).
    span(0, [
      kv('s', S('text “ü”')), kv('empty', S('')), kv('i', value((w) => w.uint32((3 << 3) | 0).uint64(1_234_567_890_123))), kv('zero', value((w) => w.uint32((3 << 3) | 0).uint32(0))),
      kv('d', value((w) => w.uint32((4 << 3) | 1).double(0.25))), kv('nan', value((w) => w.uint32((4 << 3) | 1).double(NaN))), kv('negzero', value((w) => w.uint32((4 << 3) | 1).double(-0))),
      kv('t', value((w) => w.uint32((2 << 3) | 0).bool(true))), kv('f', value((w) => w.uint32((2 << 3) | 0).bool(false))),
      kv('b', value((w) => w.uint32((7 << 3) | 2).bytes(Buffer.from([0, 1, 254, 255])))), kv('nob', value((w) => w.uint32((7 << 3) | 2).bytes(Buffer.alloc(0)))),
      kv('twice', value((w) => w.uint32((1 << 3) | 2).string('first').uint32((1 << 3) | 2).string('last'))),
      kv('both', value((w) => w.uint32((3 << 3) | 0).uint32(5).uint32((1 << 3) | 2).string('string wins'))),
      kv('int.double', value((w) => w.uint32((4 << 3) | 1).double(1.5).uint32((3 << 3) | 0).uint32(7))),
      kv('bool.bytes', value((w) => w.uint32((7 << 3) | 2).bytes(Buffer.from('x')).uint32((2 << 3) | 0).uint32(1))),
      kv('nothing', value(() => undefined)), kv('novalue'), kv('', S('empty key')), kv('__proto__', S('not the prototype')), kv('12', S('an index')), kv('s', S('the same key again')),
      kv('key.twice', S('v'), (w) => w.uint32((1 << 3) | 2).string('key.last')),
      // Varints written long: a bool of two bytes, an int of seven, a zero of three.
      kv('long.bool', value((w) => w.uint32((2 << 3) | 0).uint32(128))), kv('long.false', raw([(2 << 3) | 0, 0x80, 0x00])),
      kv('seven', value((w) => w.uint32((3 << 3) | 0).uint64(2 ** 48 + 3))), kv('padded', raw([(3 << 3) | 0, 0x80, 0x80, 0x00]))
    ], (w) => {
      // Unknown fields of every wire type, a known field of another wire type, and the end time again.
      w.uint32((40 << 3) | 0).uint32(300).uint32((41 << 3) | 1).fixed64(1).uint32((42 << 3) | 2).string('unknown').uint32((43 << 3) | 5).fixed32(9)
      w.uint32((5 << 3) | 0).uint32(1).uint32((6 << 3) | 2).string('not a kind').uint32((8 << 3) | 1).fixed64('1795305496000000001')
      w.uint32((15 << 3) | 2).bytes(W().uint32((2 << 3) | 2).string('status “ü”').uint32((3 << 3) | 0).uint32(2).uint32((9 << 3) | 2).string('x').finish())
    }),
    // What protobufjs decodes: arrays, kvlists, a value given twice, a negative and a large integer, a status twice, a long kind, a long status code.
    span(1, [kv('list', value((w) => w.uint32((5 << 3) | 2).bytes(W().uint32((1 << 3) | 2).bytes(S('a').finish()).finish())))]),
    span(2, [kv('map', value((w) => w.uint32((6 << 3) | 2).bytes(W().uint32((1 << 3) | 2).bytes(kv('k', S('v'))).finish())))]),
    span(3, [kv('merged', S('a'), (w) => w.uint32((2 << 3) | 2).bytes(value((v) => v.uint32((3 << 3) | 0).uint32(4)).finish()))]),
    span(4, [kv('negative', value((w) => w.uint32((3 << 3) | 0).int64(-5)))]),
    span(5, [kv('large', value((w) => w.uint32((3 << 3) | 0).uint64('18014398509481985')))]),
    span(6, [], (w) => w.uint32((15 << 3) | 2).bytes(W().uint32((2 << 3) | 2).string('one').finish()).uint32((15 << 3) | 2).bytes(W().uint32((3 << 3) | 0).uint32(2).finish())),
    span(7, [], (w) => w.uint32((6 << 3) | 0).uint32(300)),
    span(8, [], (w) => w.uint32((15 << 3) | 2).bytes(W().uint32((3 << 3) | 0).uint32(130).finish())),
    span(9, [kv('wide.tag', value((w) => w.uint32((20 << 3) | 0).uint32(1).uint32((1 << 3) | 2).string('after a two-byte tag')))]),
  ]
  const scope = W().uint32((1 << 3) | 2).string('odd').finish()
  const ss = W().uint32((1 << 3) | 2).bytes(scope)
  for (const sp of spans) ss.uint32((2 << 3) | 2).bytes(sp)
  const rs = W().uint32((2 << 3) | 2).bytes(ss.finish()).finish()
  return W().uint32((1 << 3) | 2).bytes(rs).finish()
}

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
    ['usage spans of every value shape, read from the bytes or by protobufjs', oddSpans()],
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
  for (const [name, buf] of requests().slice(0, 4)) {
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

t.test('spans read from the bytes are the spans protobufjs decodes: values, keys in the same order, the fallbacks', async (t) => {
  const buf = oddSpans()
  t.ok(scanTraces(buf, PREFIX_BYTES), 'the scan follows the request')
  const got = readOnly(buf) as DecodedTraces
  const want = reference(buf) as DecodedTraces
  t.equal(got.items.length, 10, 'every span is read')
  t.same(got, want, 'the same items')
  // Deep equality does not see the order of keys; the stored attributes keep it.
  t.same(got.items.map((it) => JSON.stringify(it)), want.items.map((it) => JSON.stringify(it)), 'the same keys in the same order')
  const first = got.items[0].span
  t.same(
    [first.attributes.s, first.attributes.i, first.attributes.twice, first.attributes.both, first.attributes['int.double'], first.attributes['bool.bytes'], first.attributes['long.bool'], first.attributes.seven],
    ['the same key again', 1_234_567_890_123, 'last', 'string wins', 7, true, true, 2 ** 48 + 3],
    'what the values came to',
  )
  t.equal(Object.getPrototypeOf(first.attributes), Object.prototype, '__proto__ is a key, not the prototype')
  t.equal(first.attributes.__proto__, 'not the prototype')
  t.same([first.kind, first.endTimeUnixNano, first.status], [3, '1795305496000000001', { code: 2, message: 'status “ü”' }])
  t.same(got.items.slice(1).map((it) => it.span.attributes), want.items.slice(1).map((it) => it.span.attributes), 'arrays, kvlists, merges, negative and large integers as protobufjs decodes them')
})
