import { TOOL } from '../block.js'
import { selection, type AnalyticsQuery } from '../query.js'
import type { TeamIndex } from '../team-index.js'
import { MoneySums } from '../units.js'

/**
 * A trace is every record sharing a traceId, completions and tool events together; records
 * without a traceId belong to none. Within a query a trace's cost is the sum of its records
 * that the query selects (time range and filters).
 */
export interface TraceTotals {
  /** Codes of the traces with selected records, in code order. */
  codes: number[]
  cost: MoneySums
  records: Float64Array
}

export interface TraceDetailTotals extends TraceTotals {
  tokenCost: MoneySums
  toolCost: MoneySums
  completions: Float64Array
  toolEvents: Float64Array
  start: Float64Array
  end: Float64Array
}

export function traceTotals(team: TeamIndex, q: AnalyticsQuery): TraceTotals {
  const size = team.traces.size
  const cost = new MoneySums(size)
  const records = new Float64Array(size)
  team.each(selection(team, q), (b, rows, n) => {
    const { trace, cost: c } = b
    for (let j = 0; j < n; j++) {
      const i = rows[j]
      const t = trace[i]
      if (t === 0) continue
      records[t]++
      const units = c[i]
      if (units === units) cost.add(t, units)
      else cost.addBig(t, b.bigCost(i))
    }
  })
  return { codes: present(records), cost, records }
}

export function traceDetailTotals(team: TeamIndex, q: AnalyticsQuery): TraceDetailTotals {
  const size = team.traces.size
  const cost = new MoneySums(size)
  const tokenCost = new MoneySums(size)
  const toolCost = new MoneySums(size)
  const records = new Float64Array(size)
  const completions = new Float64Array(size)
  const toolEvents = new Float64Array(size)
  const start = new Float64Array(size).fill(Infinity)
  const end = new Float64Array(size).fill(-Infinity)
  team.each(selection(team, q), (b, rows, n) => {
    const { trace, cost: c, flags, time, duration } = b
    for (let j = 0; j < n; j++) {
      const i = rows[j]
      const t = trace[i]
      if (t === 0) continue
      records[t]++
      const tool = (flags[i] & TOOL) !== 0
      if (tool) toolEvents[t]++
      else completions[t]++
      const part = tool ? toolCost : tokenCost
      const units = c[i]
      if (units === units) {
        cost.add(t, units)
        part.add(t, units)
      } else {
        cost.addBig(t, b.bigCost(i))
        part.addBig(t, b.bigCost(i))
      }
      const at = time[i]
      if (at < start[t]) start[t] = at
      const d = duration[i]
      const done = d === d ? at + d : at
      if (done > end[t]) end[t] = done
    }
  })
  return { codes: present(records), cost, records, tokenCost, toolCost, completions, toolEvents, start, end }
}

function present(records: Float64Array): number[] {
  const codes: number[] = []
  for (let t = 1; t < records.length; t++) if (records[t] > 0) codes.push(t)
  return codes
}

/** The traces' costs ascending: doubles when every one is exact as a double (the usual case), else bigints. */
export function sortedCosts(totals: TraceTotals): Float64Array | bigint[] {
  const { codes, cost } = totals
  if (cost.small) {
    const out = new Float64Array(codes.length)
    for (let i = 0; i < codes.length; i++) out[i] = cost.lo[codes[i]]
    return out.sort()
  }
  return codes.map((t) => cost.get(t)).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
}
