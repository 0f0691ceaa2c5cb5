import type { Attribution, Caller, Cost, UsageRecord } from '../model/usage-record.js'
import { BODY_KEYS } from './body-keys.js'

/**
 * lmdb-js's value encoder for a database: msgpackr's Encoder, constructed by lmdb-js with the
 * database's shared-structure options. `encode` is an instance property in msgpackr.
 */
export interface ValueEncoder {
  encode(value: unknown, mode?: number): Uint8Array
  decode(bytes: Uint8Array, options?: unknown): unknown
}
export type ValueEncoderClass = new (options: object) => ValueEncoder

/**
 * The first byte of a record in the fixed layout. msgpack leaves 0xc1 unused, and msgpackr writes
 * it only inside bundled strings (which lmdb-js does not turn on), never as a value's first byte:
 * a record written by an earlier build (a msgpack record or map) never starts with it.
 */
const MARK = 0xc1
/** A record whose body is in msgpack (and a dedup entry). */
const FORMAT = 1
/** A record whose body is in meterd's own encoding; builds that read only format 1 refuse it. */
const FORMAT_OWN_BODY = 2
const ATTRIBUTED = 1
const HAS_COST = 2
/** Format 2: the record's text is UTF-16LE rather than UTF-8 (it holds a lone surrogate, which UTF-8 cannot carry). */
const TEXT_UTF16 = 4
/** lmdb-js's flag for an encode inside a write transaction, whose bytes are copied before the next encode. */
const RESET_BUFFER_MODE = 1024
/**
 * msgpackr's and lmdb-js's flag for an encode whose result may be the encoder's own buffer with the
 * value's bytes between its `start` and `end` properties, instead of a new view of them.
 */
const REUSE_BUFFER_MODE = 512

/** A buffer whose bytes of the value are start to end (REUSE_BUFFER_MODE), as lmdb-js reads it. */
type Spanned = Buffer & { start?: number; end?: number }

// Its own ArrayBuffer (allocUnsafeSlow, never a slice of Node's pool): lmdb-js takes the address
// of a spanned buffer's ArrayBuffer as that of its byte 0.
let scratch: Spanned = Buffer.allocUnsafeSlow(16 * 1024)
let pos = 0

function room(bytes: number): void {
  if (pos + bytes <= scratch.length) return
  const bigger = Buffer.allocUnsafeSlow(Math.max(scratch.length * 2, pos + bytes + 1024))
  scratch.copy(bigger, 0, 0, pos)
  scratch = bigger
}

function writeLength(n: number): void {
  while (n >= 0x80) {
    scratch[pos++] = (n & 0x7f) | 0x80
    n >>>= 7
  }
  scratch[pos++] = n
}

function writeBytes(bytes: Uint8Array): void {
  room(5 + bytes.length)
  writeLength(bytes.length)
  scratch.set(bytes, pos)
  pos += bytes.length
}

/**
 * Whether a value is a usage record this layout holds whole: the meta fields meterd sets (ids,
 * times, caller and attribution as strings; UsageRecord in src/model/usage-record.ts) and
 * nothing else beside them. Anything else is written by msgpack as before.
 */
function fits(v: any): v is UsageRecord {
  if (v === null || typeof v !== 'object' || typeof v.id !== 'string' || typeof v.kind !== 'string') return false
  if (typeof v.eventTime !== 'string' || typeof v.receivedAt !== 'string' || typeof v.attributed !== 'boolean') return false
  if (typeof v.body !== 'object' || v.body === null || typeof v.caller !== 'object' || v.caller === null) return false
  if (typeof v.attribution !== 'object' || v.attribution === null) return false
  // id, kind, body, eventTime, receivedAt, caller, attribution, attributed, and cost when priced.
  let n = 0
  for (const _ in v) n++
  if (n !== (v.cost === undefined ? 8 : 9)) return false
  const c = v.caller
  if (typeof c.account !== 'string' || typeof c.tenant !== 'string' || typeof c.team !== 'string' || typeof c.environment !== 'string' || typeof c.keyId !== 'string') return false
  let m = 0
  for (const _ in c) m++
  if (m !== 5) return false
  const a = v.attribution
  m = 0
  for (const _ in a) m++
  return (
    m === 13 &&
    typeof a.organizationName === 'string' &&
    typeof a.productName === 'string' &&
    typeof a.subscriberId === 'string' &&
    typeof a.subscriberEmail === 'string' &&
    typeof a.subscriberCredentialName === 'string' &&
    typeof a.agent === 'string' &&
    typeof a.traceId === 'string' &&
    typeof a.workflowId === 'string' &&
    typeof a.taskType === 'string' &&
    typeof a.subscriptionId === 'string' &&
    typeof a.ticketId === 'string' &&
    typeof a.environment === 'string' &&
    typeof a.region === 'string'
  )
}

/**
 * The usage-records database's encoder (docs/performance.md, "CPU per request, counted"): a
 * record's meta fields — id, kind, times, caller, attribution, the attributed flag — in a fixed
 * order after their lengths, the cost in msgpack, and the client's body. msgpackr encodes a
 * record by walking its structure transitions key by key, which cost about 70,000 instructions
 * per completion; this layout writes the meta fields straight and, for a JSON-shaped body, the
 * body in an encoding of its own (writeBody, below: about half of msgpackr's cost for it).
 *
 * Format 2, a body the own encoding holds (every body a client sends as JSON):
 *   0xc1, 2, flags (1: attributed, 2: has cost, 4: the text is UTF-16LE),
 *   the lengths (UTF-16 code units) of 22 strings: id, kind, eventTime, receivedAt,
 *     caller (account, tenant, team, environment, keyId), attribution (organizationName …
 *     region, in Attribution's order),
 *   [cost: length, msgpack],
 *   the body's structure: its length (at least two bytes), its bytes (writeBody),
 *   the text, up to the end: the 22 strings, then the body's, one after the other; UTF-8, or
 *     UTF-16LE (flag 4) when it holds a lone surrogate, which UTF-8 would turn into U+FFFD
 *
 * Format 1, any other body (and every record of earlier builds in this layout):
 *   0xc1, 1, flags (1: attributed, 2: has cost),
 *   the lengths of the 22 strings, as above,
 *   the byte length (always five bytes) and UTF-8 bytes of the 22 strings one after the other,
 *   [cost: length, msgpack], body: msgpack up to the end
 *
 * Lengths are unsigned LEB128 (a fixed width padded with 0x80 bytes where noted). Builds that
 * read only format 1 refuse format 2 (its format byte) rather than misread it. Values written
 * by earlier builds (msgpack) decode as before, and anything that is not a record of this shape
 * (lmdb-js's shared structures, a record with fields this layout does not know) is still
 * written in msgpack.
 */
export function usageRecordCodec(Base: ValueEncoderClass): ValueEncoderClass {
  return class UsageRecordEncoder extends Base {
    constructor(options: object) {
      super(options)
      const msgpack = this.encode
      this.encode = (value: unknown, mode?: number): Uint8Array => (fits(value) ? encodeRecord(this, msgpack, value, mode ?? 0) : msgpack.call(this, value, mode))
    }

    override decode(bytes: Uint8Array, options?: unknown): unknown {
      if (bytes[0] !== MARK) return super.decode(bytes, options)
      const end = typeof options === 'number' && options > -1 ? options : ((options as { end?: number } | undefined)?.end ?? bytes.length)
      return decodeRecord(bytes, end, (part) => super.decode(part))
    }
  }
}

/**
 * The usage dedup databases' encoder (`usage-dedup.4`, and `usage-dedup` of earlier layouts): an
 * entry `{ id, at }` (the record's id and when it was stored) as 0xc1, 1, `at` as a little-endian double, then the id's UTF-8 bytes to the end,
 * instead of msgpack's generic record path (about 5,000 instructions per entry under callgrind).
 * Entries written by earlier builds (msgpack) and anything of another shape decode and encode as
 * msgpack, as in usageRecordCodec.
 */
export function dedupEntryCodec(Base: ValueEncoderClass): ValueEncoderClass {
  return class DedupEntryEncoder extends Base {
    constructor(options: object) {
      super(options)
      const msgpack = this.encode
      this.encode = (value: unknown, mode?: number): Uint8Array => (isDedupEntry(value) ? encodeDedup(value, mode ?? 0) : msgpack.call(this, value, mode))
    }

    override decode(bytes: Uint8Array, options?: unknown): unknown {
      if (bytes[0] !== MARK) return super.decode(bytes, options)
      const end = typeof options === 'number' && options > -1 ? options : ((options as { end?: number } | undefined)?.end ?? bytes.length)
      const b = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
      if (b[1] !== FORMAT) throw new Error(`a dedup entry in layout ${b[1]}, which this build of meterd does not read`)
      return { id: b.toString('utf8', 10, end), at: b.readDoubleLE(2) }
    }
  }
}

function isDedupEntry(v: any): v is { id: string; at: number } {
  if (v === null || typeof v !== 'object' || typeof v.id !== 'string' || typeof v.at !== 'number') return false
  let n = 0
  for (const _ in v) n++
  return n === 2
}

function encodeDedup(e: { id: string; at: number }, mode: number): Uint8Array {
  pos = 0
  room(10 + 3 * e.id.length)
  scratch[0] = MARK
  scratch[1] = FORMAT
  scratch.writeDoubleLE(e.at, 2)
  pos = 10 + scratch.write(e.id, 10, 'utf8')
  return written(mode)
}

/**
 * The scratch bytes 0 to pos as an encode's result. Inside a write transaction (RESET_BUFFER_MODE)
 * lmdb-js copies them before the next encode: the scratch buffer itself, spanned, when lmdb-js
 * takes a span (REUSE_BUFFER_MODE; no new view per value). Otherwise lmdb-js keeps their address
 * until the commit, so they must be a buffer of their own.
 */
function written(mode: number): Uint8Array {
  if (!(mode & RESET_BUFFER_MODE)) return Buffer.from(scratch.subarray(0, pos))
  if (!(mode & REUSE_BUFFER_MODE)) return scratch.subarray(0, pos)
  scratch.start = 0
  scratch.end = pos
  return scratch
}

/** The bytes of a msgpack part: its encoder's buffer, spanned (REUSE_BUFFER_MODE), or a view of them. */
function bytesOf(part: Spanned): Uint8Array {
  return part.start === undefined ? part : new Uint8Array(part.buffer, part.byteOffset + part.start, part.end! - part.start)
}

type Msgpack = (this: ValueEncoder, value: unknown, mode?: number) => Uint8Array

function metaText(r: UsageRecord): string {
  const c = r.caller
  const a = r.attribution
  return (
    r.id + r.kind + r.eventTime + r.receivedAt +
    c.account + c.tenant + c.team + c.environment + c.keyId +
    a.organizationName + a.productName + a.subscriberId + a.subscriberEmail + a.subscriberCredentialName + a.agent +
    a.traceId + a.workflowId + a.taskType + a.subscriptionId + a.ticketId + a.environment + a.region
  )
}

/** The flags byte, the lengths of the 22 meta strings, and the cost; after MARK and the format. */
/** The 22 meta strings' lengths, gathered before they are written. */
const metaLengths = new Uint32Array(22)

function writeHead(r: UsageRecord): void {
  const c = r.caller
  const a = r.attribution
  scratch[pos++] = (r.attributed ? ATTRIBUTED : 0) | (r.cost !== undefined ? HAS_COST : 0)
  const m = metaLengths
  m[0] = r.id.length
  m[1] = r.kind.length
  m[2] = r.eventTime.length
  m[3] = r.receivedAt.length
  m[4] = c.account.length
  m[5] = c.tenant.length
  m[6] = c.team.length
  m[7] = c.environment.length
  m[8] = c.keyId.length
  m[9] = a.organizationName.length
  m[10] = a.productName.length
  m[11] = a.subscriberId.length
  m[12] = a.subscriberEmail.length
  m[13] = a.subscriberCredentialName.length
  m[14] = a.agent.length
  m[15] = a.traceId.length
  m[16] = a.workflowId.length
  m[17] = a.taskType.length
  m[18] = a.subscriptionId.length
  m[19] = a.ticketId.length
  m[20] = a.environment.length
  m[21] = a.region.length
  // One loop with the one-byte case inline: 22 calls of writeLength cost about twice as much.
  for (let i = 0; i < 22; i++) {
    const n = m[i]
    if (n < 0x80) scratch[pos++] = n
    else writeLength(n)
  }
}

/** The cost in msgpack, after its length (msgpack parts: see encodeRecord). */
function writeCost(encoder: ValueEncoder, msgpack: Msgpack, cost: Cost, mode: number): void {
  writeBytes(bytesOf(msgpack.call(encoder, cost, mode & RESET_BUFFER_MODE ? RESET_BUFFER_MODE | REUSE_BUFFER_MODE : 0) as Spanned))
}

function encodeRecord(encoder: ValueEncoder, msgpack: Msgpack, r: UsageRecord, mode: number): Uint8Array {
  pos = 0
  room(3 + 22 * 5)
  scratch[pos++] = MARK
  scratch[pos++] = FORMAT_OWN_BODY
  writeHead(r)
  if (r.cost !== undefined) writeCost(encoder, msgpack, r.cost, mode)
  const bodyText = writeBody(r.body)
  if (bodyText === undefined) return encodeRecordMsgpackBody(encoder, msgpack, r, mode)
  // The meta strings and the body's as one: one native write. Their lengths (in UTF-16 code
  // units, which the write keeps) are in the lengths and the structure, so they split back apart.
  const text = metaText(r) + bodyText
  // UTF-8 would turn a lone surrogate into U+FFFD; UTF-16LE keeps every code unit as it is.
  if ((text as string & { isWellFormed(): boolean }).isWellFormed()) {
    room(3 * text.length)
    pos += scratch.write(text, pos, 'utf8')
  } else {
    room(2 * text.length)
    pos += scratch.write(text, pos, 'utf16le')
    scratch[2] |= TEXT_UTF16
  }
  return written(mode)
}

/** Format 1: the record with its body in msgpack, for a body the own encoding does not hold. */
function encodeRecordMsgpackBody(encoder: ValueEncoder, msgpack: Msgpack, r: UsageRecord, mode: number): Uint8Array {
  // The meta strings as one: one native UTF-8 write instead of one per string. Their lengths (in
  // UTF-16 code units, which the write keeps) go first, so any text can be split back apart.
  const meta = metaText(r)
  pos = 0
  room(3 + 22 * 5 + 5 + 3 * meta.length)
  scratch[pos++] = MARK
  scratch[pos++] = FORMAT
  writeHead(r)
  // The UTF-8 length is written once known: reserve the most a varint of it can take.
  const lengthAt = pos
  pos += 5
  const bytes = scratch.write(meta, pos, 'utf8')
  let n = bytes
  for (let i = 0; i < 4; i++, n >>>= 7) scratch[lengthAt + i] = (n & 0x7f) | 0x80
  scratch[lengthAt + 4] = n
  pos += bytes
  if (r.cost !== undefined) writeCost(encoder, msgpack, r.cost, mode)
  // Inside a transaction msgpackr may write its next value over this one (RESET_BUFFER_MODE):
  // each part is copied before the next encode. Its bytes come spanned in msgpackr's buffer
  // (REUSE_BUFFER_MODE) rather than as a new Buffer view, which costs more than the copy.
  const body = bytesOf(msgpack.call(encoder, r.body, mode & RESET_BUFFER_MODE ? RESET_BUFFER_MODE | REUSE_BUFFER_MODE : 0) as Spanned)
  room(body.length)
  scratch.set(body, pos)
  pos += body.length
  return written(mode)
}

// The body's own encoding (format 2). msgpackr writes a body through its shared structures,
// walking their transitions key by key with megamorphic property loads (about 23k instructions
// for the bench's completion under callgrind); this writes the structure of a JSON-shaped value
// as about one byte per value, with the usual property names as one byte each (body-keys.ts),
// and leaves its strings (values, and other names) to the record's one text. The structure is
// one value; a value is one byte, then what it says:
//
//   0x00–0x7f  a string of that many UTF-16 code units (the next ones of the text)
//   0x80–0xbf  the integer 0–63
//   0xc0 null, 0xc1 false, 0xc2 true, 0xc3 undefined
//   0xc4       a string: its length in UTF-16 code units (LEB128)
//   0xc5       an integer 64 to 2^31 - 1 (LEB128); 0xc6 an integer from -2^31 to -1: minus it (LEB128)
//   0xc7       any other number (a fraction, -0, beyond 32 bits, NaN, ±Infinity): float64, little-endian
//   0xc8       an object: its properties in order, each a key byte and its value, then 0xff. A key
//              byte below BODY_KEYS.length is that name of BODY_KEYS; 0xfe: a name from the text,
//              its length in UTF-16 code units (LEB128) following
//   0xc9       an array: its length (LEB128), its items; 0xd0–0xdf: an array of 0–15 items
//
// The text holds the strings in the order the walk meets them (a name before its value). It
// holds plain objects (prototype Object.prototype or null), arrays, strings, numbers, booleans,
// null and undefined, MAX_DEPTH deep at most; a body with anything else (a Date, a Map, a typed
// array, a bigint, a class instance, …) is written in msgpack as a whole (format 1), as before.

const STR = 0xc4
const UINT = 0xc5
const NEGINT = 0xc6
const FLOAT64 = 0xc7
const OBJECT = 0xc8
const ARRAY = 0xc9
const NULL = 0xc0
const FALSE = 0xc1
const TRUE = 0xc2
const UNDEFINED = 0xc3
const SHORT_ARRAY = 0xd0
const KEY_LITERAL = 0xfe
const END = 0xff
const MAX_DEPTH = 64
/**
 * Bytes a walk may write past `limit`: it checks before each property and item, and writes at
 * most a key and a value's head (6 + 6 bytes), then an object's end for each level it leaves.
 */
const MARGIN = 16 + MAX_DEPTH + 48
/** A walk's answers besides a position: a value it does not hold, and more structure than the room made for it. */
const UNHELD = -1
const FULL = -2

const KEY_INDEX = new Map<string, number>(BODY_KEYS.map((k, i) => [k, i]))
if (BODY_KEYS.length > KEY_LITERAL || KEY_INDEX.size !== BODY_KEYS.length || KEY_INDEX.has('__proto__')) throw new Error('body-keys.ts: the table is not valid')

/**
 * The keys of the last bodies walked, by their place in the walk, and their key bytes: bodies of
 * one client come with the same keys in the same order, and comparing a key with the one met at
 * the same place last time (the same internalized string, from JSON.parse) costs less than a
 * look-up in KEY_INDEX.
 */
const SEEN = 256
const seenKeys: string[] = new Array<string>(SEEN).fill('')
const seenCodes = new Uint8Array(SEEN)

/** The walk's state: the buffer it writes (scratch), how far it may write, the strings met, keys met. */
let out: Buffer = scratch
let limit = 0
let text = ''
let keyAt = 0

/**
 * Writes the body's structure at pos, after its length; the body's strings, or undefined when it
 * holds a value this encoding does not (pos is then anywhere after where it was).
 */
function writeBody(body: unknown): string | undefined {
  const lengthAt = pos
  for (let max = 4096; ; max *= 8) {
    // Room for the structure's length (two bytes; more, below, within MARGIN) and up to `max`
    // bytes of it, and MARGIN.
    room(2 + max + MARGIN)
    out = scratch
    limit = lengthAt + 2 + max
    text = ''
    keyAt = 0
    const end = writeValue(body, lengthAt + 2, 0)
    const t = text
    text = ''
    if (end === UNHELD) return undefined
    if (end === FULL) continue
    // The structure's length: in the two bytes kept for it, or more, the structure moved up.
    const n = end - lengthAt - 2
    let size = 2
    while (n >= 2 ** (7 * size)) size++
    if (size > 2) scratch.copyWithin(lengthAt + size, lengthAt + 2, end)
    let v = n
    for (let i = 0; i < size - 1; i++, v = Math.floor(v / 128)) scratch[lengthAt + i] = (v % 128) | 0x80
    scratch[lengthAt + size - 1] = v
    pos = lengthAt + size + n
    return t
  }
}

function putLength(b: Buffer, p: number, n: number): number {
  while (n >= 0x80) {
    b[p++] = (n & 0x7f) | 0x80
    n >>>= 7
  }
  b[p++] = n
  return p
}

/** Writes a value at p; the position after it, or UNHELD, or FULL. */
function writeValue(v: unknown, p: number, depth: number): number {
  const b = out
  if (typeof v === 'string') {
    const n = v.length
    if (n < 0x80) b[p++] = n
    else {
      b[p++] = STR
      p = putLength(b, p, n)
    }
    text += v
    return p
  }
  if (typeof v === 'number') {
    if ((v | 0) === v && (v !== 0 || 1 / v > 0)) {
      if (v >= 0) {
        if (v < 64) b[p++] = 0x80 | v
        else {
          b[p++] = UINT
          p = putLength(b, p, v)
        }
      } else {
        b[p++] = NEGINT
        p = putLength(b, p, -v)
      }
      return p
    }
    b[p] = FLOAT64
    b.writeDoubleLE(v, p + 1)
    return p + 9
  }
  if (typeof v === 'boolean') {
    b[p++] = v ? TRUE : FALSE
    return p
  }
  if (v === null) {
    b[p++] = NULL
    return p
  }
  if (v === undefined) {
    b[p++] = UNDEFINED
    return p
  }
  if (typeof v !== 'object' || depth === MAX_DEPTH) return UNHELD
  return Array.isArray(v) ? writeArray(v, p, depth + 1) : writePlain(v, p, depth + 1)
}

function writeArray(a: unknown[], p: number, depth: number): number {
  const b = out
  const n = a.length
  if (n < 16) b[p++] = SHORT_ARRAY | n
  else {
    b[p++] = ARRAY
    p = putLength(b, p, n)
  }
  for (let i = 0; i < n; i++) {
    if (p > limit) return FULL
    p = writeValue(a[i], p, depth)
    if (p < 0) return p
  }
  return p
}

function writePlain(o: object, p: number, depth: number): number {
  const proto = Object.getPrototypeOf(o)
  if (proto !== Object.prototype && proto !== null) return UNHELD
  const b = out
  b[p++] = OBJECT
  // The text in a local while the properties are strings (most are): a store to the module's
  // `text` costs a write barrier each time.
  let t = text
  for (const k in o) {
    if (p > limit) return FULL
    const i = keyAt++
    let code: number
    if (i < SEEN && seenKeys[i] === k) code = seenCodes[i]
    else {
      code = KEY_INDEX.get(k) ?? KEY_LITERAL
      if (i < SEEN) {
        seenKeys[i] = k
        seenCodes[i] = code
      }
    }
    b[p++] = code
    if (code === KEY_LITERAL) {
      p = putLength(b, p, k.length)
      t += k
    }
    const v = (o as Record<string, unknown>)[k]
    if (typeof v === 'string') {
      const n = v.length
      if (n < 0x80) b[p++] = n
      else {
        b[p++] = STR
        p = putLength(b, p, n)
      }
      t += v
      continue
    }
    text = t
    p = writeValue(v, p, depth)
    if (p < 0) return p
    t = text
  }
  text = t
  b[p++] = END
  return p
}

/**
 * The shapes of the objects read so far: a tree of their key sequences (a shape's node is reached
 * from ROOT by its keys in order), each node counting the objects that ended there. An object of
 * a shape met SHAPE_AFTER times is then made by a function compiled for it, one object literal
 * with its keys (`{"model": v[i], "provider": v[i + 1], …}`), as msgpackr reads its structures:
 * a literal makes the object with its final hidden class at once, where adding its properties one
 * by one is a megamorphic keyed store each (about 7.8k instructions for the bench's completion).
 * The tree and the compiled shapes are bounded (MAX_NODES, MAX_SHAPES); an object past them is
 * made as before, a property at a time. The bytes on disk are the same either way.
 */
interface Shape {
  /** The node's parent (undefined for ROOT), and the key that leads here from it. */
  readonly parent: Shape | undefined
  readonly key: string
  /** Whether the keys up to here include `__proto__`: such a shape is never compiled (an own property needs defineProperty). */
  readonly proto: boolean
  /** The first key byte met after this node and where it leads (most nodes have one child), then the others by byte. */
  byte: number
  child: Shape | undefined
  children: (Shape | undefined)[] | undefined
  /** Children by a literal key (one the table does not name). */
  literals: Map<string, Shape> | undefined
  /** Objects that ended here, the shape's keys (made on its first end), its compiled maker. */
  ended: number
  keys: string[] | undefined
  make: ((v: unknown[], i: number) => Record<string, unknown>) | undefined
}

/** Objects of a shape made a property at a time before one is compiled for it (a one-off shape costs no compile). */
const SHAPE_AFTER = 3
const MAX_NODES = 4096
const MAX_SHAPES = 1024
/** Wider shapes are not compiled (a literal of thousands of properties gains nothing and costs a large function). */
const MAX_SHAPE_KEYS = 256

function shape(parent: Shape | undefined, key: string): Shape {
  nodes++
  return { parent, key, proto: key === '__proto__' || (parent?.proto ?? false), byte: -1, child: undefined, children: undefined, literals: undefined, ended: 0, keys: undefined, make: undefined }
}

let nodes = 0
let shapes = 0
/** Whether this process may compile code from strings (node --disallow-code-generation-from-strings may forbid it). */
let compiling = true
const ROOT: Shape = shape(undefined, '')

/** The shape tree's size against its bounds (for the tests: the tree must stay bounded whatever bodies are read). */
export function bodyShapes(): { nodes: number; compiled: number; maxNodes: number; maxCompiled: number } {
  return { nodes, compiled: shapes, maxNodes: MAX_NODES, maxCompiled: MAX_SHAPES }
}

/** The shape after `node` with key byte k, added to the tree when new and there is room; undefined when not. */
function byteChild(node: Shape, k: number): Shape | undefined {
  if (node.child === undefined) {
    if (nodes >= MAX_NODES) return undefined
    node.byte = k
    return (node.child = shape(node, BODY_KEYS[k]))
  }
  const children = (node.children ??= [])
  let next = children[k]
  if (next === undefined && nodes < MAX_NODES) next = children[k] = shape(node, BODY_KEYS[k])
  return next
}

function literalChild(node: Shape, key: string): Shape | undefined {
  const literals = (node.literals ??= new Map())
  let next = literals.get(key)
  if (next === undefined && nodes < MAX_NODES) literals.set(key, (next = shape(node, key)))
  return next
}

function keysOf(node: Shape): string[] {
  const keys: string[] = []
  for (let n = node; n.parent !== undefined; n = n.parent) keys.push(n.key)
  return keys.reverse()
}

function compile(keys: string[]): Shape['make'] {
  // JSON.stringify quotes any name as a valid literal key; `__proto__` never comes here (a quoted
  // `"__proto__":` in a literal would set the prototype).
  let body = ''
  for (let j = 0; j < keys.length; j++) body += `${j === 0 ? '' : ','}${JSON.stringify(keys[j])}:v[i+${j}]`
  try {
    return new Function('v', 'i', `return {${body}}`) as Shape['make']
  } catch {
    compiling = false
    return undefined
  }
}

/**
 * The values of the objects being read, each object's from its start on (a nested object's above
 * its parent's), and `top`, where the next nested object's start. A new array for each body: stores into a
 * young array need no remembered-set entry (a long-lived one cost a write barrier's slow path a
 * value), and it keeps no body's strings alive after its read.
 */
const NO_VALUES: unknown[] = []
let values = NO_VALUES
let top = 0

/** The body being read: its structure's bytes, where the next is, the record's text, where the next string starts. */
const NO_BYTES = Buffer.alloc(0)
let src: Buffer = NO_BYTES
let cursor = 0
let bodyText = ''
let textAt = 0

/** The body whose structure is b's bytes from `from` to `to`, its strings from `text` at `textFrom`. */
function readBody(b: Buffer, from: number, to: number, text: string, textFrom: number): unknown {
  src = b
  cursor = from
  bodyText = text
  textAt = textFrom
  values = new Array(64)
  top = 0
  const body = readValue()
  const whole = cursor === to && textAt === text.length
  src = NO_BYTES
  bodyText = ''
  values = NO_VALUES
  if (!whole) throw new Error('a usage record whose body does not read back whole')
  return body
}

function readLength(): number {
  let n = 0
  let shift = 0
  for (;;) {
    const byte = src[cursor++]
    n += (byte & 0x7f) * 2 ** shift
    if (byte < 0x80) return n
    shift += 7
  }
}

function readValue(): unknown {
  const t = src[cursor++]
  if (t < 0x80) return bodyText.slice(textAt, (textAt += t))
  if (t < 0xc0) return t & 0x3f
  switch (t) {
    case NULL:
      return null
    case FALSE:
      return false
    case TRUE:
      return true
    case UNDEFINED:
      return undefined
    case STR: {
      const n = readLength()
      return bodyText.slice(textAt, (textAt += n))
    }
    case UINT:
      return readLength()
    case NEGINT:
      return -readLength()
    case FLOAT64: {
      const v = src.readDoubleLE(cursor)
      cursor += 8
      return v
    }
    case OBJECT:
      return readObject()
    case ARRAY:
      return readArray(readLength())
  }
  if (t >= SHORT_ARRAY && t < SHORT_ARRAY + 16) return readArray(t & 0x0f)
  throw new Error(`a usage record whose body holds the unknown value byte ${t}`)
}

function readArray(n: number): unknown[] {
  const a: unknown[] = new Array(n)
  for (let i = 0; i < n; i++) a[i] = readValue()
  return a
}

function readObject(): Record<string, unknown> {
  const start = top
  const v = values
  let at = start
  let node = ROOT
  for (;;) {
    const from = cursor
    const k = src[cursor++]
    let next: Shape | undefined
    if (node.byte === k) next = node.child
    else if (k < BODY_KEYS.length) next = byteChild(node, k)
    else if (k === END) {
      top = start
      return made(node, start)
    } else if (k === KEY_LITERAL) {
      const textFrom = textAt
      const n = readLength()
      next = literalChild(node, bodyText.slice(textAt, (textAt += n)))
      if (next === undefined) textAt = textFrom
    } else throw new Error(`a usage record whose body names key ${k}, which this build of meterd does not know`)
    if (next === undefined) {
      // No room left in the tree: the keys so far and the rest as before, a property at a time.
      cursor = from
      top = start
      return readProperties(assign({}, keysOf(node), start))
    }
    node = next
    const t = src[cursor]
    if (t < 0x80) {
      // A short string (most values), without readValue's other cases.
      cursor++
      v[at++] = bodyText.slice(textAt, (textAt += t))
      continue
    }
    // A nested object's values go above this one's.
    top = at + 1
    v[at++] = readValue()
  }
}

/** The object of shape `node` whose values are from `start` on: by its compiled maker, or a property at a time (compiling one once the shape is met often enough). */
function made(node: Shape, start: number): Record<string, unknown> {
  if (node.make !== undefined) return node.make(values, start)
  const keys = (node.keys ??= keysOf(node))
  if (++node.ended >= SHAPE_AFTER && compiling && !node.proto && shapes < MAX_SHAPES && keys.length <= MAX_SHAPE_KEYS) {
    const make = compile(keys)
    if (make !== undefined) {
      shapes++
      node.make = make
      return make(values, start)
    }
  }
  return assign({}, keys, start)
}

function assign(o: Record<string, unknown>, keys: string[], start: number): Record<string, unknown> {
  for (let j = 0; j < keys.length; j++) {
    const key = keys[j]
    // An own property, as JSON.parse makes it, rather than the object's prototype.
    if (key === '__proto__') Object.defineProperty(o, key, { value: values[start + j], writable: true, enumerable: true, configurable: true })
    else o[key] = values[start + j]
  }
  return o
}

/** The rest of an object's properties, each added as it is read (past the tree's bounds). */
function readProperties(o: Record<string, unknown>): Record<string, unknown> {
  for (;;) {
    const k = src[cursor++]
    if (k < BODY_KEYS.length) o[BODY_KEYS[k]] = readValue()
    else if (k === END) return o
    else if (k === KEY_LITERAL) {
      const n = readLength()
      const key = bodyText.slice(textAt, (textAt += n))
      // An own property, as JSON.parse makes it, rather than the object's prototype.
      if (key === '__proto__') Object.defineProperty(o, key, { value: readValue(), writable: true, enumerable: true, configurable: true })
      else o[key] = readValue()
    } else throw new Error(`a usage record whose body names key ${k}, which this build of meterd does not know`)
  }
}

function decodeRecord(bytes: Uint8Array, end: number, msgpack: (bytes: Uint8Array) => unknown): UsageRecord {
  const b = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  const format = b[1]
  if (format !== FORMAT && format !== FORMAT_OWN_BODY) throw new Error(`a usage record in layout ${format}, which this build of meterd does not read`)
  const flags = b[2]
  let at = 3
  const length = (from: Uint8Array): number => {
    let n = 0
    let shift = 0
    for (;;) {
      const byte = from[at++]
      n += (byte & 0x7f) * 2 ** shift
      if (byte < 0x80) return n
      shift += 7
    }
  }
  const lengths: number[] = new Array(22)
  let metaLength = 0
  for (let i = 0; i < 22; i++) metaLength += lengths[i] = length(b)
  let meta: string
  let cost: Cost | undefined
  let body: unknown
  if (format === FORMAT_OWN_BODY) {
    // The body is read first, straight from lmdb-js's buffer, which the cost's msgpack decode
    // may overwrite (see below); the cost's bytes are copied for that decode.
    let costBytes: Uint8Array | undefined
    if (flags & HAS_COST) {
      const n = length(b)
      costBytes = Uint8Array.prototype.slice.call(b, at, at + n)
      at += n
    }
    const n = length(b)
    meta = b.toString(flags & TEXT_UTF16 ? 'utf16le' : 'utf8', at + n, end)
    body = readBody(b, at, at + n, meta, metaLength)
    if (costBytes !== undefined) cost = msgpack(costBytes) as Cost
  } else {
    const metaBytes = length(b)
    meta = b.toString('utf8', at, at + metaBytes)
    at += metaBytes
    // The msgpack parts are copied first: lmdb-js reads into one shared buffer, and a decode that
    // meets a structure this process has not loaded yet reads the structures into that buffer,
    // over the bytes still to decode (the first read of a record in a fresh process).
    const rest = Uint8Array.prototype.slice.call(b, at, end)
    at = 0
    if (flags & HAS_COST) {
      const n = length(rest)
      cost = msgpack(rest.subarray(at, at + n)) as Cost
      at += n
    }
    body = msgpack(rest.subarray(at))
  }
  let next = 0
  let field = 0
  const str = (): string => meta.slice(next, (next += lengths[field++]))
  const id = str()
  const kind = str()
  const eventTime = str()
  const receivedAt = str()
  const caller: Caller = { account: str(), tenant: str(), team: str(), environment: str(), keyId: str() }
  const attribution: Attribution = {
    organizationName: str(),
    productName: str(),
    subscriberId: str(),
    subscriberEmail: str(),
    subscriberCredentialName: str(),
    agent: str(),
    traceId: str(),
    workflowId: str(),
    taskType: str(),
    subscriptionId: str(),
    ticketId: str(),
    environment: str(),
    region: str(),
  }
  // The field order of a record as the ingest path builds it (and as earlier builds stored it).
  const r = { id, kind, body, eventTime, receivedAt, caller, attribution, attributed: (flags & ATTRIBUTED) !== 0 } as UsageRecord
  if (cost !== undefined) r.cost = cost
  return r
}
