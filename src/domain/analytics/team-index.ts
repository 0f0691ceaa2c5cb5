import { Block, BLOCK_ROWS, TOOL, type RowValues } from './block.js'
import { Dictionary } from './dictionary.js'
import { DIMENSIONS } from './dimensions.js'

const DIMS = DIMENSIONS.length

/** Which rows a query reads: an event-time range and, optionally, the tuples its filters allow and one kind. */
export interface Selection {
  /** Inclusive, ms since epoch. */
  from: number
  /** Exclusive. */
  to: number
  /** 1 for each tuple code that passes the filters; null: every tuple. */
  tuples: Uint8Array | null
  kind?: 'completion' | 'tool'
}

/** Where a row lives; valid for the life of the index (rows never move). */
export interface RowRef {
  block: Block
  row: number
}

// One scratch list of selected rows, reused by every block of every query: queries are
// synchronous, so no two ever use it at once.
const SELECTED = new Uint32Array(BLOCK_ROWS)

/**
 * One team's rows and the dictionaries their codes point into. A row's attribution is one
 * code into a table of distinct tuples (organization, product, subscriber, credential, agent,
 * provider, model, tool, environment): records of one client repeat the same few tuples, so a
 * row pays 4 bytes for all nine dimensions, and a filter is decided once per tuple, not per row.
 */
export class TeamIndex {
  readonly dims: Dictionary[] = DIMENSIONS.map(() => new Dictionary())
  readonly traces = new Dictionary()
  /** tupleDims[d][tuple] = the tuple's code in dims[d]. */
  tupleDims: Uint32Array[] = DIMENSIONS.map(() => new Uint32Array(16))
  private readonly tupleCodes = new Map<string, number>()
  tupleCount = 0
  readonly blocks: Block[] = []
  rows = 0

  constructor(readonly team: string) {}

  /** The tuple code of these dimension values (normalised, in DIMENSIONS order). */
  tuple(values: readonly string[]): number {
    let key = ''
    const codes = new Array<number>(DIMS)
    for (let d = 0; d < DIMS; d++) {
      codes[d] = this.dims[d].code(values[d])
      key += codes[d] + ','
    }
    let t = this.tupleCodes.get(key)
    if (t === undefined) {
      t = this.tupleCount++
      if (t === this.tupleDims[0].length) this.tupleDims = this.tupleDims.map((a) => growTo(a, a.length * 2))
      for (let d = 0; d < DIMS; d++) this.tupleDims[d][t] = codes[d]
      this.tupleCodes.set(key, t)
    }
    return t
  }

  add(v: RowValues): RowRef {
    let block = this.blocks[this.blocks.length - 1]
    if (block === undefined || block.full) this.blocks.push((block = new Block()))
    const row = block.add(v)
    this.rows++
    return { block, row }
  }

  /**
   * Calls `fn` once per block that has selected rows, with the selected row indexes in
   * `rows[0..n)` (a shared scratch list, valid only during the call).
   */
  each(sel: Selection, fn: (block: Block, rows: Uint32Array, n: number) => void): void {
    const { from, to, tuples } = sel
    const kind = sel.kind === undefined ? -1 : sel.kind === 'tool' ? TOOL : 0
    for (const b of this.blocks) {
      if (b.maxTime < from || b.minTime >= to) continue
      const inside = b.minTime >= from && b.maxTime < to
      const { time, tuple, flags, size } = b
      let n = 0
      for (let i = 0; i < size; i++) {
        if (!inside) {
          const t = time[i]
          if (t < from || t >= to) continue
        }
        if (tuples !== null && tuples[tuple[i]] === 0) continue
        if (kind !== -1 && (flags[i] & TOOL) !== kind) continue
        SELECTED[n++] = i
      }
      if (n > 0) fn(b, SELECTED, n)
    }
  }

  /** Bytes held by this team's rows (columns at capacity) and tuple table; the dictionaries' strings are not counted. */
  get bytes(): number {
    let n = this.tupleDims[0].length * 4 * DIMS
    for (const b of this.blocks) n += b.bytes
    return n
  }
}

function growTo(a: Uint32Array, n: number): Uint32Array {
  const b = new Uint32Array(n)
  b.set(a)
  return b
}
