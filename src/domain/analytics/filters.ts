import { DIM, normalise, type DimensionFilter } from './dimensions.js'
import type { TeamIndex } from './team-index.js'

/**
 * The tuples and subscribers of a team that pass every filter (1) or not (0), null where no
 * filter applies. Each filter is decided once per distinct value of its dimension, then once
 * per tuple: the cost is the number of distinct values and tuples, never the number of rows.
 */
export function masks(team: TeamIndex, filters: readonly DimensionFilter[]): { tuples: Uint8Array | null; subscribers: Uint8Array | null } {
  let tuples: Uint8Array | null = null
  let subscribers: Uint8Array | null = null
  for (const f of filters) {
    const d = DIM[f.dimension]
    const dict = team.dims[d]
    const value = normalise(f.dimension, f.value)
    const ok = new Uint8Array(dict.size)
    if (f.op === 'equals') {
      const c = dict.find(value)
      if (c > 0) ok[c] = 1
    } else {
      // Code 0 is "not given": no filter value (never empty) matches it.
      for (let c = 1; c < dict.size; c++) ok[c] = matches(dict.values[c], f.op, value) ? 1 : 0
    }
    if (d === DIM.subscriberId) {
      if (subscribers === null) subscribers = ok
      else for (let c = 0; c < ok.length; c++) subscribers[c] &= ok[c]
      continue
    }
    tuples ??= new Uint8Array(team.tupleCount).fill(1)
    const col = team.tupleColumn(f.dimension)
    for (let t = 0; t < team.tupleCount; t++) if (ok[col[t]] === 0) tuples[t] = 0
  }
  return { tuples, subscribers }
}

function matches(v: string, op: DimensionFilter['op'], value: string): boolean {
  switch (op) {
    case 'contains':
      return v.includes(value)
    case 'startsWith':
      return v.startsWith(value)
    case 'endsWith':
      return v.endsWith(value)
    default:
      return v === value
  }
}

/** Whether one record's dimension values (normalised, in DIMENSIONS order) pass every filter. */
export function passes(dims: readonly string[], filters: readonly DimensionFilter[]): boolean {
  for (const f of filters) {
    const v = dims[DIM[f.dimension]]
    if (v === '' || !matches(v, f.op, normalise(f.dimension, f.value))) return false
  }
  return true
}
