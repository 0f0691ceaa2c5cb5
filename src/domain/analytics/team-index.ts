import { Block, BLOCK_ROWS, TOOL } from './block.js'
import { Dictionary } from './dictionary.js'
import { DIM, DIMENSIONS, type Dimension } from './dimensions.js'
import type { RowInput } from './row.js'
import { TupleTable } from './tuple-table.js'

/** The dimensions a row keeps in its tuple: all but the subscriber, which has a column of its own. */
const IN_TUPLE = DIMENSIONS.map((_, d) => d).filter((d) => d !== DIM.subscriberId)

/** Which rows a query reads: an event-time range and, optionally, the tuples and subscribers its filters allow and one kind. */
export interface Selection {
  /** Inclusive, ms since epoch. */
  from: number
  /** Exclusive. */
  to: number
  /** 1 for each tuple code that passes the filters; null: every tuple. */
  tuples: Uint8Array | null
  /** 1 for each subscriber code that passes the filters; null: every subscriber. */
  subscribers: Uint8Array | null
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
 * code into a table of distinct tuples (organization, product, credential, agent, provider,
 * model, tool, environment) plus its subscriber's code: records of one client repeat the same
 * few tuples, so a row pays 8 bytes for all nine dimensions, and a filter is decided once per
 * tuple, not per row.
 */
export class TeamIndex {
  readonly dims: Dictionary[] = DIMENSIONS.map(() => new Dictionary())
  readonly traces = new Dictionary()
  readonly tuples = new TupleTable(IN_TUPLE.length)
  readonly blocks: Block[] = []
  rows = 0
  private readonly codes = new Uint32Array(IN_TUPLE.length)

  constructor(readonly team: string) {}

  get tupleCount(): number {
    return this.tuples.count
  }

  /** tuple → its code in dimension `d`'s dictionary (not the subscriber: rows hold that themselves). */
  tupleColumn(dimension: Dimension): Uint32Array {
    const k = IN_TUPLE.indexOf(DIM[dimension])
    if (k === -1) throw new Error(`${dimension} is not part of a tuple`)
    return this.tuples.cols[k]
  }

  add(row: RowInput): RowRef {
    for (let k = 0; k < IN_TUPLE.length; k++) this.codes[k] = this.dims[IN_TUPLE[k]].code(row.dims[IN_TUPLE[k]])
    const tuple = this.tuples.code(this.codes)
    const subscriber = this.dims[DIM.subscriberId].code(row.dims[DIM.subscriberId])
    const trace = row.traceId === '' ? 0 : this.traces.code(row.traceId)
    let block = this.blocks[this.blocks.length - 1]
    if (block === undefined || block.full) this.blocks.push((block = new Block()))
    const i = block.add(row, tuple, subscriber, trace)
    this.rows++
    return { block, row: i }
  }

  /**
   * Calls `fn` once per block that has selected rows, with the selected row indexes in
   * `rows[0..n)` (a shared scratch list, valid only during the call).
   */
  each(sel: Selection, fn: (block: Block, rows: Uint32Array, n: number) => void): void {
    const { from, to, tuples, subscribers } = sel
    const kind = sel.kind === undefined ? -1 : sel.kind === 'tool' ? TOOL : 0
    for (const b of this.blocks) {
      if (b.maxTime < from || b.minTime >= to) continue
      const inside = b.minTime >= from && b.maxTime < to
      const { time, tuple, subscriber, flags, size } = b
      let n = 0
      for (let i = 0; i < size; i++) {
        if (!inside) {
          const t = time[i]
          if (t < from || t >= to) continue
        }
        if (tuples !== null && tuples[tuple[i]] === 0) continue
        if (subscribers !== null && subscribers[subscriber[i]] === 0) continue
        if (kind !== -1 && (flags[i] & TOOL) !== kind) continue
        SELECTED[n++] = i
      }
      if (n > 0) fn(b, SELECTED, n)
    }
  }

  /** Bytes held by this team's rows (columns at capacity) and tuple table; the dictionaries' strings are not counted. */
  get bytes(): number {
    let n = this.tuples.bytes
    for (const b of this.blocks) n += b.bytes
    return n
  }
}
