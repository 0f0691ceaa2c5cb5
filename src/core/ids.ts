import { randomFillSync } from 'node:crypto'

// Crockford base32: ids sort lexicographically in creation order (ULID layout:
// 48 bits of milliseconds, then 80 bits that are random at each new millisecond
// and incremented within one, so ids from one process are strictly increasing).
const ALPHABET = '0123456789ABCDEFGHJKMNPQRSTVWXYZ'
const CODES = Uint8Array.from(ALPHABET, (c) => c.charCodeAt(0))

let lastMs = -1
const tail = new Uint8Array(10)
// Random bytes drawn 4 KiB at a time: one system call per ~400 new milliseconds, not one per id.
const pool = new Uint8Array(4096)
let poolAt = pool.length

function randomTail(): void {
  if (poolAt + tail.length > pool.length) {
    randomFillSync(pool)
    poolAt = 0
  }
  // Copied byte by byte: a subarray view per new millisecond is an allocation on every request.
  for (let i = 0; i < tail.length; i++) tail[i] = pool[poolAt + i]
  poolAt += tail.length
}

function incrementTail(): void {
  for (let i = tail.length - 1; i >= 0; i--) {
    if (tail[i] !== 0xff) {
      tail[i]++
      return
    }
    tail[i] = 0
  }
}

// The 10 time characters change once per millisecond; ids of the same millisecond share them.
let timeMs = -1
let timeText = ''
function timePart(ms: number): string {
  if (ms !== timeMs) {
    timeMs = ms
    timeText = timeChars(ms)
  }
  return timeText
}

function timeChars(ms: number): string {
  // 48 bits: the top 8 above 2^40 as two characters, the rest as eight (bit operations are 32-bit).
  const hi = Math.floor(ms / 2 ** 40)
  const lo = ms - hi * 2 ** 40
  const l = Math.floor(lo / 2 ** 20)
  const r = lo % 2 ** 20
  return String.fromCharCode(
    CODES[hi >>> 5], CODES[hi & 31],
    CODES[l >>> 15], CODES[(l >>> 10) & 31], CODES[(l >>> 5) & 31], CODES[l & 31],
    CODES[r >>> 15], CODES[(r >>> 10) & 31], CODES[(r >>> 5) & 31], CODES[r & 31],
  )
}

/** The time characters every id made at `ms` starts with: ids made at `ms` or later sort after it. */
export function idTimePrefix(ms: number): string {
  return timeChars(Math.max(0, Math.floor(ms)))
}

/** The milliseconds an id (or a prefix of idTimePrefix) was made at: the inverse of idTimePrefix. */
export function idTimeMs(id: string): number {
  let ms = 0
  for (let i = 0; i < 10; i++) ms = ms * 32 + ALPHABET.indexOf(id[i])
  return ms
}

/** A time-sortable, unique record id (26 characters). */
export function newId(now = Date.now()): string {
  if (now > lastMs) {
    lastMs = now
    randomTail()
    tail[0] &= 0x7f // leave headroom so increments within a millisecond never wrap
  } else {
    incrementTail()
  }
  // 80 bits → 16 base32 characters: each 5 bytes are 8 characters. One string built at once,
  // not sixteen concatenations.
  const t = tail
  return timePart(lastMs) + String.fromCharCode(
    CODES[t[0] >>> 3], CODES[((t[0] & 7) << 2) | (t[1] >>> 6)], CODES[(t[1] >>> 1) & 31], CODES[((t[1] & 1) << 4) | (t[2] >>> 4)],
    CODES[((t[2] & 15) << 1) | (t[3] >>> 7)], CODES[(t[3] >>> 2) & 31], CODES[((t[3] & 3) << 3) | (t[4] >>> 5)], CODES[t[4] & 31],
    CODES[t[5] >>> 3], CODES[((t[5] & 7) << 2) | (t[6] >>> 6)], CODES[(t[6] >>> 1) & 31], CODES[((t[6] & 1) << 4) | (t[7] >>> 4)],
    CODES[((t[7] & 15) << 1) | (t[8] >>> 7)], CODES[(t[8] >>> 2) & 31], CODES[((t[8] & 3) << 3) | (t[9] >>> 5)], CODES[t[9] & 31],
  )
}
