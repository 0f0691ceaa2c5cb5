import { ERROR } from '../block.js'
import { DIM } from '../dimensions.js'
import { selection, type AnalyticsQuery } from '../query.js'
import type { TeamIndex } from '../team-index.js'
import { MoneySums } from '../units.js'

export const INTERVALS = { minute: 60_000, hour: 3_600_000, day: 86_400_000 } as const
export type Interval = keyof typeof INTERVALS

/**
 * The buckets covering [from, to): aligned to the interval in UTC (the epoch is midnight UTC,
 * so a multiple of the interval is the start of a UTC minute, hour or day).
 */
export function bucketsOf(from: number, to: number, interval: Interval): { start: number; count: number; width: number } {
  const width = INTERVALS[interval]
  const start = Math.floor(from / width) * width
  const end = Math.ceil(to / width) * width
  return { start, count: Math.max(0, (end - start) / width), width }
}

export interface ToolBucket {
  /** Start of the bucket, ms since epoch. */
  start: number
  cost: bigint
  events: number
  errors: number
  /** Mean durationMs of the bucket's events that give one; null when none does. */
  meanDurationMs: number | null
}

export interface ToolSeries {
  toolId: string
  cost: bigint
  events: number
  errors: number
  /** Every bucket of the range, empty ones included. */
  buckets: ToolBucket[]
}

/** Per tool (tools with events in the range, largest cost first), its tool events' cost, count, errors and mean duration per bucket. */
export function toolsCostOverTime(team: TeamIndex | undefined, q: AnalyticsQuery, interval: Interval): ToolSeries[] {
  if (team === undefined) return []
  const { start, count, width } = bucketsOf(q.from, q.to, interval)
  const toolOf = team.tupleColumn('toolId')
  const tools = team.dims[DIM.toolId].size
  const slots = tools * count
  const cost = new MoneySums(slots)
  const events = new Float64Array(slots)
  const errors = new Float64Array(slots)
  const durations = new Float64Array(slots)
  const timed = new Float64Array(slots)
  team.each(selection(team, q, 'tool'), (b, rows, n) => {
    const { tuple, time, flags, duration, cost: c } = b
    for (let j = 0; j < n; j++) {
      const i = rows[j]
      const k = toolOf[tuple[i]] * count + Math.floor((time[i] - start) / width)
      events[k]++
      if ((flags[i] & ERROR) !== 0) errors[k]++
      const d = duration[i]
      if (d === d) {
        durations[k] += d
        timed[k]++
      }
      const units = c[i]
      if (units === units) cost.add(k, units)
      else cost.addBig(k, b.bigCost(i))
    }
  })
  const out: ToolSeries[] = []
  const names = team.dims[DIM.toolId].values
  for (let t = 1; t < tools; t++) {
    let n = 0
    for (let x = 0; x < count; x++) n += events[t * count + x]
    if (n === 0) continue
    let total = 0n
    let e = 0
    const buckets: ToolBucket[] = new Array(count)
    for (let x = 0; x < count; x++) {
      const k = t * count + x
      const units = cost.get(k)
      total += units
      e += errors[k]
      buckets[x] = { start: start + x * width, cost: units, events: events[k], errors: errors[k], meanDurationMs: timed[k] > 0 ? durations[k] / timed[k] : null }
    }
    out.push({ toolId: names[t], cost: total, events: n, errors: e, buckets })
  }
  return out.sort((x, y) => (x.cost === y.cost ? (x.toolId < y.toolId ? -1 : 1) : x.cost > y.cost ? -1 : 1))
}
