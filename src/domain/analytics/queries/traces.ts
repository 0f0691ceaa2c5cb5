import { TOOL } from '../block.js'
import { DIM } from '../dimensions.js'
import { percentileOfSorted } from '../rank.js'
import { selection, type AnalyticsQuery } from '../query.js'
import type { TeamIndex } from '../team-index.js'
import { divideUnits, MoneySums } from '../units.js'

/**
 * A trace is every record sharing a traceId, completions and tool events together; records
 * without a traceId belong to none. Within a query a trace's cost is the sum of its records
 * that the query selects (time range and filters).
 */
interface TraceTotals {
  /** Codes of the traces with selected records, in code order. */
  codes: number[]
  cost: MoneySums
  records: Float64Array
}

interface TraceDetailTotals extends TraceTotals {
  tokenCost: MoneySums
  toolCost: MoneySums
  completions: Float64Array
  toolEvents: Float64Array
  start: Float64Array
  end: Float64Array
}

function traceTotals(team: TeamIndex, q: AnalyticsQuery): TraceTotals {
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

function traceDetailTotals(team: TeamIndex, q: AnalyticsQuery): TraceDetailTotals {
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
function sortedCosts(totals: TraceTotals): Float64Array | bigint[] {
  const { codes, cost } = totals
  if (cost.small) {
    const out = new Float64Array(codes.length)
    for (let i = 0; i < codes.length; i++) out[i] = cost.lo[codes[i]]
    return out.sort()
  }
  return codes.map((t) => cost.get(t)).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
}

export const PERCENTILES = [50, 90, 95, 99] as const

export interface TraceDistribution {
  /** Traces with selected records. */
  count: number
  total: bigint
  min: bigint | null
  max: bigint | null
  /** total / count, rounded half-even to the unit. */
  mean: bigint | null
  /** Nearest rank (rank.ts): each is the cost of a real trace. */
  percentiles: Record<`p${(typeof PERCENTILES)[number]}`, bigint | null>
  /** counts[k] traces cost at least bounds[k] and less than bounds[k + 1]. */
  histogram: { bounds: bigint[]; counts: number[] }
  threshold: bigint | null
  /** Traces costing strictly more than the threshold; share = count / traces (0 without traces). */
  above: { count: number; share: number } | null
}

/** The distribution of trace costs: percentiles, histogram, and how many traces cost more than the threshold. */
export function traceCostDistribution(team: TeamIndex | undefined, q: AnalyticsQuery, opts: { threshold?: bigint; buckets?: number } = {}): TraceDistribution {
  const sorted = team === undefined ? new Float64Array(0) : sortedCosts(traceTotals(team, q))
  const n = sorted.length
  const big = (v: number | bigint | undefined): bigint | null => (v === undefined ? null : BigInt(v))
  let total = 0n
  if (sorted instanceof Float64Array) {
    // Sum in doubles while exact, as MoneySums does.
    const sums = new MoneySums(1)
    for (let i = 0; i < n; i++) sums.add(0, sorted[i])
    total = sums.get(0)
  } else for (const c of sorted) total += c
  const threshold = opts.threshold ?? null
  let above: TraceDistribution['above'] = null
  if (threshold !== null) {
    const count = n - upperBound(sorted, threshold)
    above = { count, share: n === 0 ? 0 : count / n }
  }
  return {
    count: n,
    total,
    min: big(sorted[0]),
    max: big(sorted[n - 1]),
    mean: n === 0 ? null : divideUnits(total, n),
    percentiles: {
      p50: big(percentileOfSorted<number | bigint>(sorted, 50)),
      p90: big(percentileOfSorted<number | bigint>(sorted, 90)),
      p95: big(percentileOfSorted<number | bigint>(sorted, 95)),
      p99: big(percentileOfSorted<number | bigint>(sorted, 99)),
    },
    histogram: histogram(sorted, opts.buckets ?? 20),
    threshold,
    above,
  }
}

/** The number of values ≤ x in an ascending array. */
function upperBound(sorted: Float64Array | bigint[], x: bigint): number {
  let lo = 0
  let hi = sorted.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (sorted[mid] <= x) lo = mid + 1
    else hi = mid
  }
  return lo
}

/**
 * At most `want` buckets of one "round" width (1, 2 or 5 × 10^k units), the first starting at
 * a multiple of the width at or below the cheapest trace; bounds are exact amounts.
 */
function histogram(sorted: Float64Array | bigint[], want: number): TraceDistribution['histogram'] {
  const n = sorted.length
  if (n === 0) return { bounds: [], counts: [] }
  const min = BigInt(sorted[0])
  const max = BigInt(sorted[n - 1])
  const span = max > min ? max - min : max > 0n ? max : 1n
  let width = roundUp((span + BigInt(want) - 1n) / BigInt(want))
  let first = floorTo(min, width)
  while ((max - first) / width + 1n > BigInt(want)) {
    width = roundUp(width + 1n)
    first = floorTo(min, width)
  }
  const count = Number((max - first) / width) + 1
  const bounds = Array.from({ length: count + 1 }, (_, k) => first + BigInt(k) * width)
  const counts = new Array<number>(count).fill(0)
  // Compared in the values' own type: doubles when they are (exact below 2^53, as the bounds then are).
  const limits: (number | bigint)[] = sorted instanceof Float64Array ? bounds.map(Number) : bounds
  let k = 0
  for (let i = 0; i < n; i++) {
    const v = sorted[i]
    while (v >= limits[k + 1]) k++
    counts[k]++
  }
  return { bounds, counts }
}

function floorTo(x: bigint, width: bigint): bigint {
  const r = x % width
  return r < 0n ? x - r - width : x - r
}

/** The smallest 1, 2 or 5 × 10^k that is ≥ x (x ≥ 1). */
function roundUp(x: bigint): bigint {
  let p = 1n
  for (;;) {
    for (const m of [1n, 2n, 5n]) if (m * p >= x) return m * p
    p *= 10n
  }
}

export interface TraceSummary {
  traceId: string
  cost: bigint
  tokenCost: bigint
  toolCost: bigint
  completions: number
  toolEvents: number
  /** First event time, ms. */
  start: number
  /** Latest event end (event time + duration when known), ms. */
  end: number
  agents: string[]
}

export interface TraceListOptions {
  sort: 'cost' | 'time'
  order: 'desc' | 'asc'
  /** Only traces costing at least this much. */
  minCost?: bigint
  page: number
  size: number
}

/** One page of the traces, by cost or by start time (ties by traceId), with how many traces qualify. */
export function traceList(team: TeamIndex | undefined, q: AnalyticsQuery, o: TraceListOptions): { total: number; traces: TraceSummary[] } {
  if (team === undefined) return { total: 0, traces: [] }
  const t = traceDetailTotals(team, q)
  const small = t.cost.small
  let codes = t.codes
  if (o.minCost !== undefined) {
    const min = o.minCost
    // As a double when the costs are: any minimum past 2^53 stays above every such cost.
    const minNumber = Number(min)
    codes = small ? codes.filter((c) => t.cost.lo[c] >= minNumber) : codes.filter((c) => t.cost.get(c) >= min)
  }
  const names = team.traces.values
  const dir = o.order === 'desc' ? -1 : 1
  const byName = (a: number, b: number) => (names[a] < names[b] ? -1 : names[a] > names[b] ? 1 : 0)
  let cmp: (a: number, b: number) => number
  if (o.sort === 'time') cmp = (a, b) => (t.start[a] - t.start[b]) * dir || byName(a, b)
  else if (small) cmp = (a, b) => (t.cost.lo[a] - t.cost.lo[b]) * dir || byName(a, b)
  else {
    const cost = new Map(codes.map((c) => [c, t.cost.get(c)]))
    cmp = (a, b) => {
      const x = cost.get(a)!
      const y = cost.get(b)!
      return (x < y ? -dir : x > y ? dir : 0) || byName(a, b)
    }
  }
  const page = topPage(codes, cmp, o.page * o.size, o.size)
  const agents = agentsOf(team, q, page)
  return {
    total: codes.length,
    traces: page.map((c) => ({
      traceId: names[c],
      cost: t.cost.get(c),
      tokenCost: t.tokenCost.get(c),
      toolCost: t.toolCost.get(c),
      completions: t.completions[c],
      toolEvents: t.toolEvents[c],
      start: t.start[c],
      end: t.end[c],
      agents: agents.get(c) ?? [],
    })),
  }
}

/** codes[skip .. skip + size) in `cmp` order, sorting only what the page needs when it is near the top. */
function topPage(codes: number[], cmp: (a: number, b: number) => number, skip: number, size: number): number[] {
  if (skip >= codes.length) return []
  const k = skip + size
  if (k * 8 >= codes.length) return codes.slice().sort(cmp).slice(skip, k)
  // A bounded max-heap of the k first: n log k instead of n log n.
  const heap: number[] = []
  const up = (i: number) => {
    while (i > 0) {
      const p = (i - 1) >> 1
      if (cmp(heap[i], heap[p]) <= 0) return
      ;[heap[i], heap[p]] = [heap[p], heap[i]]
      i = p
    }
  }
  const down = (i: number) => {
    for (;;) {
      const l = 2 * i + 1
      const r = l + 1
      let m = i
      if (l < heap.length && cmp(heap[l], heap[m]) > 0) m = l
      if (r < heap.length && cmp(heap[r], heap[m]) > 0) m = r
      if (m === i) return
      ;[heap[i], heap[m]] = [heap[m], heap[i]]
      i = m
    }
  }
  for (const c of codes) {
    if (heap.length < k) {
      heap.push(c)
      up(heap.length - 1)
    } else if (cmp(c, heap[0]) < 0) {
      heap[0] = c
      down(0)
    }
  }
  return heap.sort(cmp).slice(skip, k)
}

/** The agents (names ascending) of the selected records of some traces. */
function agentsOf(team: TeamIndex, q: AnalyticsQuery, codes: number[]): Map<number, string[]> {
  const wanted = new Uint8Array(team.traces.size)
  for (const c of codes) wanted[c] = 1
  const found = new Map<number, Set<number>>()
  const agentOf = team.tupleColumn('agent')
  if (codes.length > 0)
    team.each(selection(team, q), (b, rows, n) => {
      const { trace, tuple } = b
      for (let j = 0; j < n; j++) {
        const i = rows[j]
        const t = trace[i]
        if (wanted[t] === 0) continue
        const a = agentOf[tuple[i]]
        if (a === 0) continue
        let s = found.get(t)
        if (s === undefined) found.set(t, (s = new Set()))
        s.add(a)
      }
    })
  const names = team.dims[DIM.agent].values
  return new Map([...found].map(([t, s]) => [t, [...s].map((a) => names[a]).sort()]))
}
