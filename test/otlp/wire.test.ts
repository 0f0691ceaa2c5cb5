/**
 * The protobuf wire reader the scan and readSpan share (src/transport/otlp/wire.ts): every read
 * stays within the end of its message, however the bytes lie. Each hostile case sits in a buffer
 * that goes on past the message's end, so a missing bounds check would read on into real bytes
 * and answer instead of throwing. Through the receiver, the same bytes are a 400 in the error
 * shape of docs/errors.md, never a 5xx.
 */
import { status } from '@grpc/grpc-js'
import t from 'tap'
import { ApiError } from '../../src/core/errors.js'
import { decodeTracesProto } from '../../src/transport/otlp/decode-proto.js'
import { RpcStatus } from '../../src/transport/otlp/proto.js'
import { WireError, WireReader } from '../../src/transport/otlp/wire.js'
import { call, startMeterd } from '../helpers/meterd.js'
import { fixture, protoOf } from '../helpers/otlp.js'

/** A reader over `bytes` at `pos`; the message ends at `end`, before the buffer does. */
const at = (bytes: number[], pos = 0): WireReader => new WireReader(Buffer.from(bytes), pos)

function refuses(t: Tap.Test, read: () => unknown, why: RegExp, what: string): void {
  try {
    read()
  } catch (err) {
    t.ok(err instanceof WireError, `${what}: a WireError`)
    t.match((err as Error).message, why, what)
    return
  }
  t.fail(`${what}: read, not refused`)
}

t.test('varints, tags and lengths: read within the message, refused past its end', async (t) => {
  const r = at([0x96, 0x01, 0x0a, 0x03, 0x61, 0x62, 0x63, 0x08])
  t.equal(r.varint32(8), 150, 'a two-byte varint')
  t.equal(r.tag(8), (1 << 3) | 2, 'a tag')
  t.equal(r.text(8), 'abc', 'a length and its bytes')
  t.equal(r.pos, 7)
  t.same([at([0xff, 0xff, 0xff, 0x7f]).varint32(4), at([0x80, 0x80, 0x80, 0x00]).varint32(4)], [2 ** 28 - 1, 0], 'four bytes, the most a tag or length has; padded too')

  refuses(t, () => at([0x05]).varint32(0), /cut off/, 'no byte left for a varint')
  refuses(t, () => at([0x80, 0x01]).varint32(1), /cut off/, 'a varint cut off after its first byte')
  refuses(t, () => at([0xff, 0x80, 0x01]).varint32(2), /cut off/, 'a varint cut off after its second byte')
  refuses(t, () => at([0xff, 0xff, 0x80, 0x01]).varint32(3), /cut off/, 'a varint cut off after its third byte')
  refuses(t, () => at([0x80, 0x80, 0x80, 0x80, 0x01]).varint32(5), /five bytes or more/, 'a tag or length of five bytes')
  refuses(t, () => at([0x02, 0x00]).tag(2), /field number 0/, 'field number 0')
  refuses(t, () => at([0x80, 0x00]).tag(2), /field number 0/, 'field number 0, padded')
  refuses(t, () => at([0x03, 0x61, 0x62, 0x63]).length(3), /a length runs past the end of its message/, 'a length one byte past the end')
  refuses(t, () => at([0x7f, 0x61]).text(2), /runs past/, 'a length far past the end')
  refuses(t, () => at([0xff, 0xff, 0xff, 0x7f]).length(4), /runs past/, 'the largest length, past the end')
  refuses(t, () => at([0x01, 0x00, 0x00, 0x00]).fixed32(3), /cut off/, 'a fixed32 cut off')
  refuses(t, () => at([0, 0, 0, 0, 0, 0, 0xf0, 0x3f]).double(7), /cut off/, 'a double cut off')
  t.equal(at([0, 0, 0, 0, 0, 0, 0xf0, 0x3f]).double(8), 1, 'a whole double')
})

t.test('skipping a field: each wire type within the message; groups and the wire types that do not exist refused', async (t) => {
  const ten = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
  const r = at([...ten, 0x00])
  r.skipVarint(11)
  t.equal(r.pos, 10, 'a varint of ten bytes (a 64-bit value) is passed')
  refuses(t, () => at([0xff, ...ten]).skipVarint(11), /more than ten bytes/, 'a varint of eleven bytes')
  refuses(t, () => at([...ten.slice(0, 9), 0x80, 0x80, 0x01]).skip(0, 12), /more than ten bytes/, 'a varint of twelve bytes, as wire type 0')
  refuses(t, () => at([0x80, 0x01]).skip(0, 1), /cut off/, 'a varint cut off, as wire type 0')

  const skipped = (wireType: number, bytes: number[], end: number): number => {
    const s = at(bytes)
    s.skip(wireType, end)
    return s.pos
  }
  t.same([skipped(1, [1, 2, 3, 4, 5, 6, 7, 8], 8), skipped(5, [1, 2, 3, 4], 4), skipped(2, [0x02, 0x61, 0x62], 3)], [8, 4, 3], 'fixed64, fixed32 and a length-delimited field are passed whole')
  refuses(t, () => at([1, 2, 3, 4, 5, 6, 7, 8]).skip(1, 7), /cut off/, 'a fixed64 cut off')
  refuses(t, () => at([1, 2, 3, 4]).skip(5, 3), /cut off/, 'a fixed32 cut off')
  refuses(t, () => at([0x02, 0x61, 0x62]).skip(2, 2), /runs past/, 'a length-delimited field past the end')
  refuses(t, () => at([0x85]).skip(2, 1), /cut off/, 'its length cut off')
  for (const w of [3, 4, 6, 7]) refuses(t, () => at([0x08, 0x01]).skip(w, 2), /wire type 3 or 4 \(a group\), 6 or 7/, `wire type ${w}`)
})

t.test('random messages, cut anywhere: reading them ends, within the message, and throws nothing but a WireError', async (t) => {
  // A small deterministic generator: the same messages each run.
  let seed = 0x9e3779b9
  const next = (n: number): number => (((seed = Math.imul(seed ^ (seed >>> 15), 0x2c1b3c6d) ^ 0x68e31da4) >>> 0) % n)
  /** Fields of every wire type (mostly the four that exist), varints of 1 to 11 bytes, lengths that sometimes lie. */
  const message = (): number[] => {
    const out: number[] = []
    for (let f = next(6); f >= 0; f--) {
      const wire = [0, 1, 2, 5, 0, 1, 2, 5, 0, 2, 3, 4, 6, 7][next(14)]
      out.push(((1 + next(15)) << 3) | wire)
      if (wire === 0) for (let i = next(11); i >= 0; i--) out.push(i === 0 ? next(128) : 128 + next(128))
      else if (wire === 2) {
        const n = next(6)
        out.push(next(8) === 0 ? n + 1 + next(4) : n)
        for (let i = 0; i < n; i++) out.push(next(256))
      } else for (let i = wire === 1 ? 8 : wire === 5 ? 4 : 0; i > 0; i--) out.push(next(256))
    }
    return out
  }
  let read = 0
  let refused = 0
  let wrong = 0
  for (let i = 0; i < 3000; i++) {
    const bytes = message()
    // The message ends before the buffer does (a cut): reads past its end would find bytes, not undefined.
    const end = next(4) === 0 ? next(bytes.length + 1) : bytes.length
    bytes.push(0x08, 0x01, 0x12, 0x01, 0x61)
    const r = at(bytes)
    try {
      while (r.pos < end) {
        const before = r.pos
        r.skip(r.tag(end) & 7, end)
        if (r.pos <= before) throw new Error(`no progress at byte ${before}`)
      }
      if (r.pos !== end) wrong++
      read++
    } catch (err) {
      if (!(err instanceof WireError)) throw err
      refused++
    }
  }
  t.equal(wrong, 0, 'a message read whole ends at its end, not past it')
  t.ok(read > 300 && refused > 300, `both read (${read}) and refused (${refused}) messages`)
})

t.test('hostile bytes after a good export: a 400 in the error shape, decoded or over HTTP', async (t) => {
  const good = Buffer.from(protoOf('traces', fixture('traces-genai-openai.json')))
  const tails: [string, number[]][] = [
    ['a truncated varint', [0x0a, 0x85]],
    ['a length past the end', [0x0a, 0x7f, 0x01]],
    ['a fixed64 cut off', [0x09, 1, 2, 3]],
    ['a ten-byte length that goes on', [0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]],
    ['a group left open (wire type 3)', [0x0b]],
    ['an end of group with no group (wire type 4)', [0x0c]],
    ['wire type 6', [0x0e]],
    ['wire type 7', [0x0f]],
  ]
  const spans = { attributePrefixes: ['gen_ai.'] }
  for (const [name, tail] of tails) {
    const body = Buffer.concat([good, Buffer.from(tail)])
    let err: unknown
    try {
      decodeTracesProto(body, { spans })
    } catch (e) {
      err = e
    }
    t.ok(err instanceof ApiError, `${name}: refused by the decoder`)
    t.match(err, { status: 400, code: 'malformed_protobuf' }, `${name}: 400 malformed_protobuf`)
  }

  const m = await startMeterd(t)
  const key = await m.key()
  for (const [name, tail] of tails) {
    const res = await fetch(`${m.url}/v2/otlp/v1/traces`, { method: 'POST', body: Buffer.concat([good, Buffer.from(tail)]), headers: { 'x-api-key': key, 'content-type': 'application/x-protobuf' } })
    t.equal(res.status, 400, `${name}: 400`)
    // A protobuf request's error is a protobuf google.rpc.Status (the OTLP specification's body).
    const st = RpcStatus.decode(new Uint8Array(await res.arrayBuffer())) as any
    t.match(st, { code: status.INVALID_ARGUMENT, message: /^malformed_protobuf: the body is not a valid ExportTraceServiceRequest/ }, `${name}: the error as a google.rpc.Status`)
  }
  const ok = await call(`${m.url}/v2/otlp/v1/traces`, { key, raw: good, headers: { 'content-type': 'application/x-protobuf' } })
  t.equal(ok.status, 200, 'the export without them is stored')
})
