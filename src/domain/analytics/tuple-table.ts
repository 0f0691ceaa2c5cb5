/**
 * Distinct tuples of dimension codes, each numbered once: an open-addressing hash table over
 * the codes themselves (no string keys), so a tuple costs its codes and two hash slots.
 */
export class TupleTable {
  count = 0
  /** cols[k][tuple] = the tuple's k-th code. */
  cols: Uint32Array[]
  private slots: Int32Array

  constructor(readonly width: number) {
    this.cols = Array.from({ length: width }, () => new Uint32Array(64))
    this.slots = new Int32Array(128).fill(-1)
  }

  /** The number of this tuple of codes (`codes[0..width)`), new or seen. */
  code(codes: ArrayLike<number>): number {
    const mask = this.slots.length - 1
    for (let i = hash(codes, this.width) & mask; ; i = (i + 1) & mask) {
      const t = this.slots[i]
      if (t === -1) return this.insert(codes, i)
      if (this.equal(t, codes)) return t
    }
  }

  private equal(t: number, codes: ArrayLike<number>): boolean {
    for (let k = 0; k < this.width; k++) if (this.cols[k][t] !== codes[k]) return false
    return true
  }

  private insert(codes: ArrayLike<number>, slot: number): number {
    const t = this.count++
    if (t === this.cols[0].length) this.cols = this.cols.map((c) => grow(c, c.length * 2))
    for (let k = 0; k < this.width; k++) this.cols[k][t] = codes[k]
    this.slots[slot] = t
    // At most half full: probes stay short.
    if (this.count * 2 > this.slots.length) this.rehash()
    return t
  }

  private rehash(): void {
    const slots = new Int32Array(this.slots.length * 2).fill(-1)
    const mask = slots.length - 1
    const codes = new Uint32Array(this.width)
    for (let t = 0; t < this.count; t++) {
      for (let k = 0; k < this.width; k++) codes[k] = this.cols[k][t]
      let i = hash(codes, this.width) & mask
      while (slots[i] !== -1) i = (i + 1) & mask
      slots[i] = t
    }
    this.slots = slots
  }

  get bytes(): number {
    return this.cols[0].length * 4 * this.width + this.slots.length * 4
  }
}

/** FNV-1a over the codes, then a final mix so that low bits depend on every code. */
function hash(codes: ArrayLike<number>, width: number): number {
  let h = 0x811c9dc5
  for (let k = 0; k < width; k++) h = Math.imul(h ^ codes[k], 0x01000193)
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  return h >>> 0
}

function grow(a: Uint32Array, n: number): Uint32Array {
  const b = new Uint32Array(n)
  b.set(a)
  return b
}
