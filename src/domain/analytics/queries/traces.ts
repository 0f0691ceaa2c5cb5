import { DIM } from '../dimensions.js'
import { selection, type AnalyticsQuery } from '../query.js'
import type { TeamIndex } from '../team-index.js'
import { traceDetailTotals } from './trace-totals.js'

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
