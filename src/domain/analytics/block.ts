/** Token kinds, in the order of a row's six token columns. */
export const TOKEN_KINDS = ['input', 'output', 'reasoning', 'cacheRead', 'cacheCreation', 'total'] as const
export const TOKENS = TOKEN_KINDS.length

/** Row flags. */
export const TOOL = 1
export const ERROR = 2

/** A token count that does not fit 32 bits is kept beside the block (`bigTokens`). */
export const TOKEN_OVERFLOW = 0xffffffff

const FIRST_CAPACITY = 64
/** Rows per block at most: a block is the unit a time range skips (by its min/max event time). */
export const BLOCK_ROWS = 16384

/** One row's own values, as `add` takes them beside its codes (row.ts RowInput). */
export interface RowValues {
  time: number
  /** Units (see units.ts): a number below 2^52, or a bigint. */
  cost: number | bigint
  flags: number
  /** ms; NaN when unknown. */
  duration: number
  /** ms; NaN when unknown. */
  ttft: number
  tokens: ArrayLike<number>
}

/**
 * Rows in columns (typed arrays): 69 bytes a row, and loops over them touch only the columns a
 * query needs. A block grows by doubling up to BLOCK_ROWS; its rows never move, so a row's
 * (block, index) stays valid and a reprice can update its cost in place.
 */
export class Block {
  size = 0
  minTime = Infinity
  maxTime = -Infinity
  time: Float64Array
  /** Code of the row's tuple of dimensions other than the subscriber (team-index.ts). */
  tuple: Uint32Array
  /** Code of the subscriber: a column of its own, as end users are many and would multiply the tuples. */
  subscriber: Uint32Array
  trace: Uint32Array
  /** Units below 2^52, or NaN with the amount in `bigCosts`. */
  cost: Float64Array
  flags: Uint8Array
  duration: Float64Array
  ttft: Float64Array
  /** TOKENS per row; TOKEN_OVERFLOW with the count in `bigTokens`. */
  tokens: Uint32Array
  bigCosts?: Map<number, bigint>
  bigTokens?: Map<number, number>

  constructor(private capacity = FIRST_CAPACITY) {
    this.time = new Float64Array(capacity)
    this.tuple = new Uint32Array(capacity)
    this.subscriber = new Uint32Array(capacity)
    this.trace = new Uint32Array(capacity)
    this.cost = new Float64Array(capacity)
    this.flags = new Uint8Array(capacity)
    this.duration = new Float64Array(capacity)
    this.ttft = new Float64Array(capacity)
    this.tokens = new Uint32Array(capacity * TOKENS)
  }

  get full(): boolean {
    return this.size === BLOCK_ROWS
  }

  /** Appends a row; returns its index. */
  add(v: RowValues, tuple: number, subscriber: number, trace: number): number {
    if (this.size === this.capacity) this.grow()
    const i = this.size++
    this.time[i] = v.time
    if (v.time < this.minTime) this.minTime = v.time
    if (v.time > this.maxTime) this.maxTime = v.time
    this.tuple[i] = tuple
    this.subscriber[i] = subscriber
    this.trace[i] = trace
    this.flags[i] = v.flags
    this.duration[i] = v.duration
    this.ttft[i] = v.ttft
    this.setCost(i, v.cost)
    for (let k = 0; k < TOKENS; k++) {
      const t = v.tokens[k]
      if (t >= 0 && t < TOKEN_OVERFLOW) this.tokens[i * TOKENS + k] = t
      else {
        this.tokens[i * TOKENS + k] = TOKEN_OVERFLOW
        ;(this.bigTokens ??= new Map()).set(i * TOKENS + k, t)
      }
    }
    return i
  }

  setCost(i: number, units: number | bigint): void {
    if (typeof units === 'number') {
      this.cost[i] = units
      this.bigCosts?.delete(i)
    } else {
      this.cost[i] = NaN
      ;(this.bigCosts ??= new Map()).set(i, units)
    }
  }

  /** Row i's token count of kind k (an index into TOKEN_KINDS). */
  token(i: number, k: number): number {
    const t = this.tokens[i * TOKENS + k]
    return t === TOKEN_OVERFLOW ? this.bigTokens!.get(i * TOKENS + k)! : t
  }

  bigCost(i: number): bigint {
    return this.bigCosts!.get(i)!
  }

  private grow(): void {
    const cap = Math.min(this.capacity * 2, BLOCK_ROWS)
    const more = <T extends Float64Array | Uint32Array | Uint8Array>(a: T, n: number): T => {
      const b = new (a.constructor as new (n: number) => T)(n)
      b.set(a)
      return b
    }
    this.time = more(this.time, cap)
    this.tuple = more(this.tuple, cap)
    this.subscriber = more(this.subscriber, cap)
    this.trace = more(this.trace, cap)
    this.cost = more(this.cost, cap)
    this.flags = more(this.flags, cap)
    this.duration = more(this.duration, cap)
    this.ttft = more(this.ttft, cap)
    this.tokens = more(this.tokens, cap * TOKENS)
    this.capacity = cap
  }

  /** Bytes held by the columns (capacity, not size). */
  get bytes(): number {
    return this.capacity * (8 + 4 + 4 + 4 + 8 + 1 + 8 + 8 + 4 * TOKENS)
  }
}
