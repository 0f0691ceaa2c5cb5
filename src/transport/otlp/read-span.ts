import type { AttributeValue, Attributes, Span } from '../../model/otlp.js'
import { fixed64Decimal, setAttribute } from './values.js'
import { WireError, WireReader } from './wire.js'

/*
 * A Span message that scan-traces.ts has walked (every length within its message, every string
 * valid UTF-8, no group, no field number 0), read straight from the request's bytes into the
 * item protobufjs and decode-proto.ts would make of it — the same name, kind, times, status and
 * attribute object, keys in the same order — without protobufjs's message objects, and with
 * attribute keys taken from a table of the keys already seen (UTF-8 decoding and V8's
 * string-table lookup of each new key string were a third of decoding a GenAI span).
 *
 * It reads the common shapes only. A field protobufjs would merge (a KeyValue's value or the
 * status given twice), an array or kvlist value, an enum of 2^28 or more, an int64 that is
 * negative or of 2^49 or more: it gives up (undefined), and the span is decoded by protobufjs as
 * before. The wire format itself is wire.ts's WireReader's, as for the scan. test/otlp/scan.test.ts compares both on every truncation and
 * thousands of corruptions of requests with such spans.
 */

const GIVE_UP = undefined

/** The Span at `buf[start, end)` with the ids the scan located and checked, or undefined when protobufjs must decode it. */
export function readSpan(buf: Buffer, start: number, end: number, traceId: string, spanId: string, parentSpanId: string): Span | undefined {
  try {
    return span(new WireReader(buf, start), end, traceId, spanId, parentSpanId)
  } catch (err) {
    // The scan walked these bytes: only a value it skipped without reading gets here (a kind or
    // status code of 2^28 or more, a bool of more than ten bytes). protobufjs reads it.
    if (err instanceof WireError) return GIVE_UP
    throw err
  }
}

function span(r: WireReader, end: number, traceId: string, spanId: string, parentSpanId: string): Span | undefined {
  let name = ''
  let kind = 0
  let startLo = 0
  let startHi = 0
  let endLo = 0
  let endHi = 0
  let statusSeen = false
  let code = 0
  let message = ''
  const attributes: Attributes = {}
  while (r.pos < end) {
    const t = r.tag(end)
    switch (t) {
      case (5 << 3) | 2:
        name = r.text(end)
        break
      case (6 << 3) | 0:
        kind = r.varint32(end)
        break
      case (7 << 3) | 1:
        startLo = r.fixed32(end)
        startHi = r.fixed32(end)
        break
      case (8 << 3) | 1:
        endLo = r.fixed32(end)
        endHi = r.fixed32(end)
        break
      case (9 << 3) | 2: {
        const n = r.length(end)
        if (!keyValue(r, r.pos + n, attributes)) return GIVE_UP
        break
      }
      case (15 << 3) | 2: {
        // A second status would be merged into the first: protobufjs's.
        if (statusSeen) return GIVE_UP
        statusSeen = true
        const stop = r.length(end) + r.pos
        while (r.pos < stop) {
          const st = r.tag(stop)
          if (st === ((2 << 3) | 2)) message = r.text(stop)
          else if (st === ((3 << 3) | 0)) code = r.varint32(stop)
          else r.skip(st & 7, stop)
        }
        break
      }
      default:
        // Ids (1, 2, 4) were located by the scan; anything else is unknown.
        r.skip(t & 7, end)
    }
  }
  return {
    traceId,
    spanId,
    parentSpanId,
    name,
    kind,
    startTimeUnixNano: fixed64Decimal({ low: startLo, high: startHi }),
    endTimeUnixNano: fixed64Decimal({ low: endLo, high: endHi }),
    attributes,
    status: { code, message },
  }
}

/** One KeyValue ending at `stop` into `into` (setAttribute, in wire order); false to give up. */
function keyValue(r: WireReader, stop: number, into: Attributes): boolean {
  let key = ''
  let value: AttributeValue = null
  let valueSeen = false
  while (r.pos < stop) {
    const t = r.tag(stop)
    if (t === ((1 << 3) | 2)) {
      const n = r.length(stop)
      key = keyAt(r.buf, r.pos, r.pos + n)
      r.pos += n
    } else if (t === ((2 << 3) | 2)) {
      // A second value would be merged into the first: protobufjs's.
      if (valueSeen) return false
      valueSeen = true
      const n = r.length(stop)
      const v = anyValue(r, r.pos + n)
      if (v === GIVE_UP) return false
      value = v
    } else r.skip(t & 7, stop)
  }
  setAttribute(into, key, value)
  return true
}

/** What decode-proto.ts's anyValue gives for an AnyValue of scalars ending at `stop` (undefined: give up). */
function anyValue(r: WireReader, stop: number): AttributeValue | undefined {
  // Each member present keeps its last value; the first present in anyValue's order is the value.
  let str: string | undefined
  let int: number | undefined
  let dbl: number | undefined
  let bool: boolean | undefined
  let bytes: string | undefined
  while (r.pos < stop) {
    const t = r.tag(stop)
    switch (t) {
      case (1 << 3) | 2:
        str = r.text(stop)
        break
      case (2 << 3) | 0:
        bool = varintBool(r, stop)
        break
      case (3 << 3) | 0: {
        const v = smallInt(r, stop)
        if (v < 0) return GIVE_UP
        int = v
        break
      }
      case (4 << 3) | 1:
        dbl = r.double(stop)
        break
      case (7 << 3) | 2: {
        const n = r.length(stop)
        bytes = r.buf.toString('base64', r.pos, r.pos + n)
        r.pos += n
        break
      }
      default:
        // arrayValue (5) and kvlistValue (6) are protobufjs's to decode.
        if (t >>> 3 === 5 || t >>> 3 === 6) return GIVE_UP
        r.skip(t & 7, stop)
    }
  }
  if (str !== undefined) return str
  if (int !== undefined) return int
  if (dbl !== undefined) return dbl
  if (bool !== undefined) return bool
  if (bytes !== undefined) return bytes
  return null
}

/** protobufjs's bool: true when any byte of the varint (up to ten) has a value bit set. */
function varintBool(r: WireReader, stop: number): boolean {
  const start = r.pos
  r.skipVarint(stop)
  for (let p = start; p < r.pos; p++) if (r.buf[p] & 127) return true
  return false
}

/** A non-negative int64 below 2^49 (seven bytes) is that number, as int64Value gives it; -1 for another (protobufjs's). */
function smallInt(r: WireReader, stop: number): number {
  const b = r.buf
  let p = r.pos
  let v = 0
  let scale = 1
  for (let i = 0; i < 7; i++) {
    if (p >= stop) return -1
    const c = b[p++]
    v += (c & 127) * scale
    scale *= 128
    if (c < 128) {
      r.pos = p
      return v
    }
  }
  return -1
}

/*
 * Attribute keys already seen, by their bytes: 1,024 slots, each keeping a key's bytes and its
 * string, internalized (what V8 makes of a string on its first property store, after a
 * string-table lookup). A miss decodes the key and takes the slot.
 */
const SLOTS = 1024
const MAX_CACHED = 64
const PROBES = 4
const slotBytes: (Buffer | undefined)[] = new Array(SLOTS).fill(undefined)
const slotText: string[] = new Array(SLOTS).fill('')

function keyAt(buf: Buffer, start: number, stop: number): string {
  const n = stop - start
  if (n === 0) return ''
  if (n > MAX_CACHED) return buf.toString('utf8', start, stop)
  let h = 0x811c9dc5 ^ n
  for (let i = start; i < stop; i++) h = Math.imul(h ^ buf[i], 0x01000193)
  // Up to four slots from the hash's (linear probing): keys that share a slot do not evict each other.
  const home = (h ^ (h >>> 15)) & (SLOTS - 1)
  let free = -1
  for (let k = 0; k < PROBES; k++) {
    const slot = (home + k) & (SLOTS - 1)
    const seen = slotBytes[slot]
    if (seen === undefined) {
      if (free < 0) free = slot
      continue
    }
    if (seen.length !== n) continue
    let i = 0
    while (i < n && seen[i] === buf[start + i]) i++
    if (i === n) return slotText[slot]
  }
  const text = internalized(buf.toString('utf8', start, stop))
  const slot = free >= 0 ? free : home
  slotBytes[slot] = Buffer.from(buf.subarray(start, stop))
  slotText[slot] = text
  return text
}

/** The string V8 keeps for `s` as a property name. */
function internalized(s: string): string {
  const o: Record<string, number> = {}
  o[s] = 0
  for (const k in o) return k
  return s // an array index such as "12": V8 keeps no name for it
}
