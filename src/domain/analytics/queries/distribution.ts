import { percentileOfSorted } from '../rank.js'
import type { AnalyticsQuery } from '../query.js'
import type { TeamIndex } from '../team-index.js'
import { divideUnits, MoneySums } from '../units.js'
import { sortedCosts, traceTotals } from './trace-totals.js'

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
  const bounds = histogramBounds(BigInt(sorted[0]), BigInt(sorted[n - 1]), want)
  const counts = new Array<number>(bounds.length - 1).fill(0)
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

/** The histogram's bucket bounds (count + 1 of them) for traces costing from `min` to `max`. */
export function histogramBounds(min: bigint, max: bigint, want: number): bigint[] {
  const span = max > min ? max - min : max > 0n ? max : 1n
  let width = roundUp((span + BigInt(want) - 1n) / BigInt(want))
  let first = floorTo(min, width)
  while ((max - first) / width + 1n > BigInt(want)) {
    width = roundUp(width + 1n)
    first = floorTo(min, width)
  }
  const count = Number((max - first) / width) + 1
  return Array.from({ length: count + 1 }, (_, k) => first + BigInt(k) * width)
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
