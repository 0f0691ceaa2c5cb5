import { randomFillSync } from 'node:crypto'

// Crockford base32: ids sort lexicographically in creation order (ULID layout:
// 48 bits of milliseconds, then 80 bits that are random at each new millisecond
// and incremented within one, so ids from one process are strictly increasing).
const ALPHABET = '0123456789ABCDEFGHJKMNPQRSTVWXYZ'

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
  tail.set(pool.subarray(poolAt, (poolAt += tail.length)))
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
    const chars = new Array<string>(10)
    let t = ms
    for (let i = 9; i >= 0; i--) {
      chars[i] = ALPHABET[t % 32]
      t = Math.floor(t / 32)
    }
    timeText = chars.join('')
  }
  return timeText
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
  let out = timePart(lastMs)
  // 80 bits → 16 base32 characters, 5 bits at a time.
  let acc = 0
  let bits = 0
  for (let i = 0; i < tail.length; i++) {
    acc = (acc << 8) | tail[i]
    bits += 8
    while (bits >= 5) {
      bits -= 5
      out += ALPHABET[(acc >>> bits) & 31]
    }
    acc &= (1 << bits) - 1
  }
  return out
}
