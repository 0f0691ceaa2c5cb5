import { DIM, normalise, type DimensionFilter } from './dimensions.js'
import type { TeamIndex } from './team-index.js'

/**
 * The tuples of a team that pass every filter (1) or not (0), or null without filters. Each
 * filter is decided once per distinct value of its dimension, then once per tuple: the cost is
 * the number of distinct values and tuples, never the number of rows.
 */
export function tupleMask(team: TeamIndex, filters: readonly DimensionFilter[]): Uint8Array | null {
  if (filters.length === 0) return null
  const mask = new Uint8Array(team.tupleCount).fill(1)
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
    const col = team.tupleDims[d]
    for (let t = 0; t < team.tupleCount; t++) if (ok[col[t]] === 0) mask[t] = 0
  }
  return mask
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
