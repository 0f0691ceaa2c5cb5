import type { DimensionFilter } from './dimensions.js'
import { masks } from './filters.js'
import type { Selection, TeamIndex } from './team-index.js'

/**
 * What every analytics question is asked over: the records of one team whose event time is in
 * [from, to) and whose attribution passes every filter. The endpoints and the alert evaluator
 * build one and pass it to the query functions.
 */
export interface AnalyticsQuery {
  /** Inclusive, ms since epoch. */
  from: number
  /** Exclusive, ms since epoch. */
  to: number
  filters: readonly DimensionFilter[]
}

export function selection(team: TeamIndex, q: AnalyticsQuery, kind?: 'completion' | 'tool'): Selection {
  return { from: q.from, to: q.to, ...masks(team, q.filters), kind }
}

/** Token counts by kind (block.ts TOKEN_KINDS). */
export interface TokenTotals {
  input: number
  output: number
  reasoning: number
  cacheRead: number
  cacheCreation: number
  total: number
}

export function tokenTotals(a: Float64Array, at = 0): TokenTotals {
  return { input: a[at], output: a[at + 1], reasoning: a[at + 2], cacheRead: a[at + 3], cacheCreation: a[at + 4], total: a[at + 5] }
}
