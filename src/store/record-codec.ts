import type { Attribution, Caller, Cost, UsageRecord } from '../model/usage-record.js'

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
const FORMAT = 1
const ATTRIBUTED = 1
const HAS_COST = 2
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
 * order, as one UTF-8 string after their lengths, then the cost and the client's body in
 * msgpack (with the database's shared structures, as before). msgpackr encodes a record by
 * walking its structure transitions key by key, which cost about 70,000 instructions per
 * completion; this layout writes the meta fields straight and leaves msgpack only the body.
 *
 *   0xc1, 1, flags (1: attributed, 2: has cost),
 *   the lengths (UTF-16 code units) of 22 strings: id, kind, eventTime, receivedAt,
 *     caller (account, tenant, team, environment, keyId), attribution (organizationName …
 *     region, in Attribution's order),
 *   the byte length and UTF-8 bytes of the 22 strings one after the other,
 *   [cost: length, msgpack], body: msgpack up to the end
 *
 * Lengths are unsigned LEB128 (the strings' byte length always in five bytes). Values written by earlier builds (msgpack) decode as before, and
 * anything that is not a record of this shape (lmdb-js's shared structures, a record with fields
 * this layout does not know) is still written in msgpack.
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

function encodeRecord(encoder: ValueEncoder, msgpack: Msgpack, r: UsageRecord, mode: number): Uint8Array {
  const c = r.caller
  const a = r.attribution
  // The meta strings as one: one native UTF-8 write instead of one per string. Their lengths (in
  // UTF-16 code units, which the write keeps) go first, so any text can be split back apart.
  const meta =
    r.id + r.kind + r.eventTime + r.receivedAt +
    c.account + c.tenant + c.team + c.environment + c.keyId +
    a.organizationName + a.productName + a.subscriberId + a.subscriberEmail + a.subscriberCredentialName + a.agent +
    a.traceId + a.workflowId + a.taskType + a.subscriptionId + a.ticketId + a.environment + a.region
  pos = 0
  room(3 + 22 * 5 + 5 + 3 * meta.length)
  scratch[pos++] = MARK
  scratch[pos++] = FORMAT
  scratch[pos++] = (r.attributed ? ATTRIBUTED : 0) | (r.cost !== undefined ? HAS_COST : 0)
  writeLength(r.id.length)
  writeLength(r.kind.length)
  writeLength(r.eventTime.length)
  writeLength(r.receivedAt.length)
  writeLength(c.account.length)
  writeLength(c.tenant.length)
  writeLength(c.team.length)
  writeLength(c.environment.length)
  writeLength(c.keyId.length)
  writeLength(a.organizationName.length)
  writeLength(a.productName.length)
  writeLength(a.subscriberId.length)
  writeLength(a.subscriberEmail.length)
  writeLength(a.subscriberCredentialName.length)
  writeLength(a.agent.length)
  writeLength(a.traceId.length)
  writeLength(a.workflowId.length)
  writeLength(a.taskType.length)
  writeLength(a.subscriptionId.length)
  writeLength(a.ticketId.length)
  writeLength(a.environment.length)
  writeLength(a.region.length)
  // The UTF-8 length is written once known: reserve the most a varint of it can take.
  const lengthAt = pos
  pos += 5
  const bytes = scratch.write(meta, pos, 'utf8')
  let n = bytes
  for (let i = 0; i < 4; i++, n >>>= 7) scratch[lengthAt + i] = (n & 0x7f) | 0x80
  scratch[lengthAt + 4] = n
  pos += bytes
  // Inside a transaction msgpackr may write its next value over this one (RESET_BUFFER_MODE):
  // each part is copied before the next encode. Its bytes come spanned in msgpackr's buffer
  // (REUSE_BUFFER_MODE) rather than as a new Buffer view, which costs more than the copy.
  const inner = mode & RESET_BUFFER_MODE ? RESET_BUFFER_MODE | REUSE_BUFFER_MODE : 0
  if (r.cost !== undefined) writeBytes(bytesOf(msgpack.call(encoder, r.cost, inner) as Spanned))
  const body = bytesOf(msgpack.call(encoder, r.body, inner) as Spanned)
  room(body.length)
  scratch.set(body, pos)
  pos += body.length
  return written(mode)
}

function decodeRecord(bytes: Uint8Array, end: number, msgpack: (bytes: Uint8Array) => unknown): UsageRecord {
  const b = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  if (b[1] !== FORMAT) throw new Error(`a usage record in layout ${b[1]}, which this build of meterd does not read`)
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
  for (let i = 0; i < 22; i++) lengths[i] = length(b)
  const metaBytes = length(b)
  const meta = b.toString('utf8', at, at + metaBytes)
  at += metaBytes
  // The msgpack parts are copied first: lmdb-js reads into one shared buffer, and a decode that
  // meets a structure this process has not loaded yet reads the structures into that buffer,
  // over the bytes still to decode (the first read of a record in a fresh process).
  const rest = Uint8Array.prototype.slice.call(b, at, end)
  at = 0
  let cost: Cost | undefined
  if (flags & HAS_COST) {
    const n = length(rest)
    cost = msgpack(rest.subarray(at, at + n)) as Cost
    at += n
  }
  const body = msgpack(rest.subarray(at))
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
