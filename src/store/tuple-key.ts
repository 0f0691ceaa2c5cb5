/**
 * The key encoding of the usage index and dedup databases (usage layout 4, usage-layout.ts).
 *
 * A key is an array of strings, stored as their UTF-8 bytes joined by a 0x00 byte; a character
 * from U+0000 to U+0005 inside a string is written as 0x05 and the character plus one, so the
 * separator sorts before every byte of a string and keys order element by element, each
 * element by its UTF-8 bytes (the order lmdb-js's own array keys had). `RANGE_END` as an
 * element is one 0xff byte, which no UTF-8 string holds: the end of every key that starts with
 * the elements before it. A symbol (lmdb-js keeps a database's shared msgpack structures under
 * one) is 0x02 and its name; no key of strings starts with a byte below 0x05 unless its first
 * string is empty, so lmdb-js's unbounded iterations, which start at 0x05, skip it (and skip
 * keys whose first string is empty: give such ranges a start).
 *
 * Why not lmdb-js's ordered-binary array keys: a database whose keys lmdb-js encodes itself
 * gets lmdb-js's `compareFast` as its LMDB comparator, which compares four bytes at a time
 * through a call to `ntohl` for each side. These keys share long prefixes (the team, the kind,
 * the event time), and those comparisons were about 24k instructions per ingest request. A
 * database with its own key encoder gets LMDB's default comparator (memcmp), and this encoder,
 * which only handles arrays of strings, costs less than the generic one (docs/performance.md).
 *
 * Strings are encoded code unit by code unit (a lone surrogate as three bytes, as ordered-binary
 * does), and `readKey` reverses exactly that, so every string reads back as it was written.
 */

/** As the last element of a range bound: after every key that starts with the elements before it. */
export const RANGE_END: unique symbol = Symbol('range end')

/** A usage index or dedup key: strings, and `RANGE_END` in range bounds only. */
export type TupleKey = (string | typeof RANGE_END)[]

const ESCAPE = 5

function writeKey(key: unknown, target: Uint8Array, start: number): number {
  let p = start
  if (!Array.isArray(key)) {
    // lmdb-js's own start of an unbounded iteration.
    if (key instanceof Uint8Array) {
      target.set(key, p)
      return p + key.length
    }
    if (typeof key === 'symbol') {
      target[p++] = 2
      return writeKey([key.description ?? ''], target, p)
    }
    throw new TypeError('a usage index key is an array of strings')
  }
  for (let i = 0; i < key.length; i++) {
    if (i > 0) target[p++] = 0
    const s: unknown = key[i]
    if (typeof s !== 'string') {
      if (s !== RANGE_END) throw new TypeError('a usage index key is an array of strings')
      target[p++] = 0xff
      continue
    }
    // Printable ASCII (above the escaped U+0000–U+0005, below U+0080) is one byte as it is,
    // and nearly every key is only that: one compare per character, then the general loop for
    // whatever is left from the first other character on.
    const len = s.length
    let j = 0
    for (; j < len; j++) {
      const c = s.charCodeAt(j)
      if ((c - 6) >>> 0 > 0x79) break
      target[p + j] = c
    }
    p += j
    for (; j < len; j++) {
      let c = s.charCodeAt(j)
      if (c < 0x80) {
        if (c > ESCAPE) target[p++] = c
        else {
          target[p++] = ESCAPE
          target[p++] = c + 1
        }
      } else if (c < 0x800) {
        target[p++] = (c >> 6) | 0xc0
        target[p++] = (c & 0x3f) | 0x80
      } else if ((c & 0xfc00) === 0xd800 && j + 1 < len && (s.charCodeAt(j + 1) & 0xfc00) === 0xdc00) {
        c = 0x10000 + ((c & 0x3ff) << 10) + (s.charCodeAt(++j) & 0x3ff)
        target[p++] = (c >> 18) | 0xf0
        target[p++] = ((c >> 12) & 0x3f) | 0x80
        target[p++] = ((c >> 6) & 0x3f) | 0x80
        target[p++] = (c & 0x3f) | 0x80
      } else {
        target[p++] = (c >> 12) | 0xe0
        target[p++] = ((c >> 6) & 0x3f) | 0x80
        target[p++] = (c & 0x3f) | 0x80
      }
    }
  }
  // A write past the end of lmdb-js's buffer is dropped; it then refuses the key by its size.
  return p
}

function readKey(source: Uint8Array, start: number, end: number): string[] | symbol {
  return source[start] === 2 ? Symbol.for(readStrings(source, start + 1, end)[0]!) : readStrings(source, start, end)
}

function readStrings(source: Uint8Array, start: number, end: number): string[] {
  const out: string[] = []
  let units: number[] = []
  for (let i = start; i < end; ) {
    const b = source[i++]!
    if (b === 0) {
      out.push(String.fromCharCode(...units))
      units = []
    } else if (b === ESCAPE) units.push(source[i++]! - 1)
    else if (b < 0x80) units.push(b)
    else if (b < 0xe0) units.push(((b & 0x1f) << 6) | (source[i++]! & 0x3f))
    else if (b < 0xf0) units.push(((b & 0x0f) << 12) | ((source[i++]! & 0x3f) << 6) | (source[i++]! & 0x3f))
    else {
      const c = (((b & 0x07) << 18) | ((source[i++]! & 0x3f) << 12) | ((source[i++]! & 0x3f) << 6) | (source[i++]! & 0x3f)) - 0x10000
      units.push(0xd800 + (c >> 10), 0xdc00 + (c & 0x3ff))
    }
  }
  out.push(String.fromCharCode(...units))
  return out
}

/** lmdb-js's `keyEncoder` option: the database's keys are written and read by these. */
export const tupleKeyEncoder = { writeKey, readKey }
