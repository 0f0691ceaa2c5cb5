import { ERROR, TOKEN_OVERFLOW, TOKENS, TOOL } from '../block.js'
import { GroupedValues } from '../grouped-values.js'
import { selection, tokenTotals, type AnalyticsQuery, type TokenTotals } from '../query.js'
import type { TeamIndex } from '../team-index.js'
import { MoneySums } from '../units.js'
import type { Percentiles } from './providers.js'

/** Everything a period adds up to; money in units (units.ts). */
export interface Totals {
  cost: bigint
  tokenCost: bigint
  toolCost: bigint
  completions: number
  toolEvents: number
  /** completions + toolEvents */
  records: number
  /** Completions with stopReason ERROR plus tool events with success false. */
  errors: number
  /** errors / records; 0 without records. */
  errorRate: number
  tokens: TokenTotals
  /** Distinct traceIds among the records. */
  traces: number
  /** Completions' requestDuration, nearest rank. */
  latencyMs: Percentiles
}

/**
 * The totals of a team's records in a query, in one pass over the rows of its time range:
 * what the summary endpoint shows and what an alert rule's metric is computed from.
 */
export function totals(team: TeamIndex | undefined, q: AnalyticsQuery): Totals {
  const cost = new MoneySums(2) // 0: completions, 1: tool events
  const counts = new Float64Array(2)
  const tokens = new Float64Array(TOKENS)
  let errors = 0
  let traces = 0
  const latency = new GroupedValues(1, team?.rows ?? 0)
  if (team !== undefined) {
    const seen = new Uint8Array(team.traces.size)
    team.each(selection(team, q), (b, rows, n) => {
      const { flags, cost: c, trace, duration, tokens: tok } = b
      for (let j = 0; j < n; j++) {
        const i = rows[j]
        const f = flags[i]
        const k = (f & TOOL) !== 0 ? 1 : 0
        counts[k]++
        if ((f & ERROR) !== 0) errors++
        const units = c[i]
        if (units === units) cost.add(k, units)
        else cost.addBig(k, b.bigCost(i))
        const t = trace[i]
        if (t !== 0 && seen[t] === 0) {
          seen[t] = 1
          traces++
        }
        if (k === 0) {
          const d = duration[i]
          if (d === d) latency.push(0, d)
          for (let x = 0, at = i * TOKENS; x < TOKENS; x++, at++) {
            const v = tok[at]
            tokens[x] += v === TOKEN_OVERFLOW ? b.token(i, x) : v
          }
        }
      }
    })
  }
  const tokenCost = cost.get(0)
  const toolCost = cost.get(1)
  const records = counts[0] + counts[1]
  const [[p50, p95]] = latency.percentiles([50, 95])
  return {
    cost: tokenCost + toolCost,
    tokenCost,
    toolCost,
    completions: counts[0],
    toolEvents: counts[1],
    records,
    errors,
    errorRate: records === 0 ? 0 : errors / records,
    tokens: tokenTotals(tokens),
    traces,
    latencyMs: { p50, p95 },
  }
}
