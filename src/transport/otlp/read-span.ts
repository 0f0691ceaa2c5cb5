import type { AttributeValue, Attributes, Span } from '../../model/otlp.js'
import { fixed64Decimal, setAttribute } from './values.js'

/*
 * A Span message that scan-traces.ts has walked (every length within its message, every string
 * valid UTF-8, no group, no field number 0), read straight from the request's bytes into the
 * item protobufjs and decode-proto.ts would make of it — the same name, kind, times, status and
 * attribute object, keys in the same order — without protobufjs's message objects, and with
 * attribute keys taken from a table of the keys already seen (UTF-8 decoding and V8's
 * string-table lookup of each new key string were a third of decoding a GenAI span).
 *
 * It reads the common shapes only. A field protobufjs would merge (a KeyValue's value or the
 * status given twice), an array or kvlist value, a varint enum or integer it does not read in
 * one go (more than one byte, or a negative int64): it gives up (undefined), and the span is
 * decoded by protobufjs as before. test/otlp/scan.test.ts compares both on every truncation and
 * thousands of corruptions of requests with such spans.
 */

const GIVE_UP = undefined

/** The Span at `buf[start, end)` with the ids the scan located and checked, or undefined when protobufjs must decode it. */
export function readSpan(buf: Buffer, start: number, end: number, traceId: string, spanId: string, parentSpanId: string): Span | undefined {
  let pos = start
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
  while (pos < end) {
    // Tags and lengths: the scan accepted only varints of at most four bytes.
    let t = buf[pos++]
    if (t >= 128) {
      const r = varint(buf, pos - 1, end)
      if (r < 0) return GIVE_UP
      t = r
      pos = varintEnd
    }
    const wire = t & 7
    const field = t >>> 3
    if (wire === 2) {
      const n = length(buf, pos, end)
      if (n < 0) return GIVE_UP
      pos = varintEnd
      const stop = pos + n
      if (field === 5) name = n === 0 ? '' : buf.toString('utf8', pos, stop)
      else if (field === 9) {
        if (!keyValue(buf, pos, stop, attributes)) return GIVE_UP
      } else if (field === 15) {
        // A second status would be merged into the first: protobufjs's.
        if (statusSeen) return GIVE_UP
        statusSeen = true
        let p = pos
        while (p < stop) {
          const st = buf[p++]
          if (st === ((2 << 3) | 2)) {
            const m = length(buf, p, stop)
            if (m < 0) return GIVE_UP
            p = varintEnd
            message = m === 0 ? '' : buf.toString('utf8', p, p + m)
            p += m
          } else if (st === ((3 << 3) | 0)) {
            if (p >= stop || buf[p] >= 128) return GIVE_UP
            code = buf[p++]
          } else if (st >= 128) return GIVE_UP
          else if ((p = skip(buf, p, stop, st & 7)) < 0) return GIVE_UP
        }
      }
      // Ids (1, 2, 4) were located by the scan; anything else is unknown.
      pos = stop
    } else if (field === 6 && wire === 0) {
      if (pos >= end || buf[pos] >= 128) return GIVE_UP
      kind = buf[pos++]
    } else if ((field === 7 || field === 8) && wire === 1) {
      if (pos + 8 > end) return GIVE_UP
      const lo = buf.readUInt32LE(pos)
      const hi = buf.readUInt32LE(pos + 4)
      if (field === 7) {
        startLo = lo
        startHi = hi
      } else {
        endLo = lo
        endHi = hi
      }
      pos += 8
    } else if ((pos = skip(buf, pos, end, wire)) < 0) return GIVE_UP
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

/** Where the last varint() or length() ended. */
let varintEnd = 0

/** A varint of at most four bytes at `pos` (a tag or a length); -1 otherwise. */
function varint(buf: Buffer, pos: number, end: number): number {
  let v = 0
  for (let i = 0; i < 4; i++) {
    if (pos >= end) return -1
    const c = buf[pos++]
    v |= (c & 127) << (7 * i)
    if (c < 128) {
      varintEnd = pos
      return v
    }
  }
  return -1
}

/** A length at `pos` whose bytes end within `end`; -1 otherwise. */
function length(buf: Buffer, pos: number, end: number): number {
  const n = varint(buf, pos, end)
  if (n < 0 || varintEnd + n > end) return -1
  return n
}

/** Skips a field's value of wire type `wire` at `pos`: its end, or -1. */
function skip(buf: Buffer, pos: number, end: number, wire: number): number {
  switch (wire) {
    case 0:
      for (let i = 0; i < 10; i++) {
        if (pos >= end) return -1
        if (buf[pos++] < 128) return pos
      }
      return -1
    case 1:
      return pos + 8 <= end ? pos + 8 : -1
    case 2: {
      const n = length(buf, pos, end)
      return n < 0 ? -1 : varintEnd + n
    }
    case 5:
      return pos + 4 <= end ? pos + 4 : -1
  }
  return -1
}

/** One KeyValue at `buf[pos, stop)` into `into` (setAttribute, in wire order); false to give up. */
function keyValue(buf: Buffer, pos: number, stop: number, into: Attributes): boolean {
  let key = ''
  let value: AttributeValue = null
  let valueSeen = false
  while (pos < stop) {
    const t = buf[pos++]
    if (t === ((1 << 3) | 2)) {
      const n = length(buf, pos, stop)
      if (n < 0) return false
      pos = varintEnd
      key = keyAt(buf, pos, pos + n)
      pos += n
    } else if (t === ((2 << 3) | 2)) {
      // A second value would be merged into the first: protobufjs's.
      if (valueSeen) return false
      valueSeen = true
      const n = length(buf, pos, stop)
      if (n < 0) return false
      pos = varintEnd
      const v = anyValue(buf, pos, pos + n)
      if (v === GIVE_UP) return false
      value = v
      pos += n
    } else if (t >= 128) return false
    else if ((pos = skip(buf, pos, stop, t & 7)) < 0) return false
  }
  setAttribute(into, key, value)
  return true
}

/** What decode-proto.ts's anyValue gives for an AnyValue of scalars (undefined: give up). */
function anyValue(buf: Buffer, pos: number, stop: number): AttributeValue | undefined {
  // Each member present keeps its last value; the first present in anyValue's order is the value.
  let str: string | undefined
  let int: number | undefined
  let dbl: number | undefined
  let bool: boolean | undefined
  let bytes: string | undefined
  while (pos < stop) {
    const t = buf[pos++]
    switch (t) {
      case (1 << 3) | 2: {
        const n = length(buf, pos, stop)
        if (n < 0) return GIVE_UP
        pos = varintEnd
        str = n === 0 ? '' : buf.toString('utf8', pos, pos + n)
        pos += n
        break
      }
      case (2 << 3) | 0: {
        // protobufjs's bool: true when any byte of the varint has a value bit set.
        let b = false
        let i = 0
        for (; i < 10; i++) {
          if (pos >= stop) return GIVE_UP
          const c = buf[pos++]
          if (c & 127) b = true
          if (c < 128) break
        }
        if (i === 10) return GIVE_UP
        bool = b
        break
      }
      case (3 << 3) | 0: {
        // A non-negative int64 below 2^49 (seven bytes) is that number, as int64Value gives it.
        let v = 0
        let scale = 1
        let i = 0
        for (; i < 7; i++) {
          if (pos >= stop) return GIVE_UP
          const c = buf[pos++]
          v += (c & 127) * scale
          scale *= 128
          if (c < 128) break
        }
        if (i === 7) return GIVE_UP
        int = v
        break
      }
      case (4 << 3) | 1:
        if (pos + 8 > stop) return GIVE_UP
        dbl = buf.readDoubleLE(pos)
        pos += 8
        break
      case (7 << 3) | 2: {
        const n = length(buf, pos, stop)
        if (n < 0) return GIVE_UP
        pos = varintEnd
        bytes = buf.toString('base64', pos, pos + n)
        pos += n
        break
      }
      default:
        // arrayValue (5) and kvlistValue (6) are protobufjs's to decode; a tag of two bytes too.
        if (t >= 128 || t >>> 3 === 5 || t >>> 3 === 6) return GIVE_UP
        if ((pos = skip(buf, pos, stop, t & 7)) < 0) return GIVE_UP
    }
  }
  if (str !== undefined) return str
  if (int !== undefined) return int
  if (dbl !== undefined) return dbl
  if (bool !== undefined) return bool
  if (bytes !== undefined) return bytes
  return null
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
