/**
 * Percentiles by nearest rank (DESIGN §8): the p-th percentile of n values is the value of
 * rank ⌈p·n/100⌉ (1-based) in ascending order: the smallest value such that at least p % of
 * the values are no greater. It is always one of the values, and exact.
 */
export function nearestRank(p: number, n: number): number {
  return Math.max(1, Math.ceil((p * n) / 100))
}

/** The p-th percentile (nearest rank) of `sorted` (ascending), or undefined when it is empty. */
export function percentileOfSorted<T>(sorted: ArrayLike<T>, p: number): T | undefined {
  return sorted.length === 0 ? undefined : sorted[nearestRank(p, sorted.length) - 1]
}

/**
 * Nearest-rank percentiles of unsorted numbers, in O(n) by selection (the array is reordered).
 * `ps` ascending; answers null for each when the array is empty.
 */
export function percentiles(values: Float64Array | number[], ps: readonly number[]): (number | null)[] {
  const n = values.length
  if (n === 0) return ps.map(() => null)
  let lo = 0
  return ps.map((p) => {
    const k = nearestRank(p, n) - 1
    // Ascending ranks: everything left of the previous rank is already no greater.
    select(values, k, lo, n - 1)
    lo = k
    return values[k]
  })
}

/** Reorders a[left..right] so that a[k] is the value of rank k, smaller ones before it, larger after (Hoare's quickselect). */
function select(a: Float64Array | number[], k: number, left: number, right: number): void {
  while (right > left) {
    // Median of three as the pivot: sorted or constant inputs stay linear.
    const mid = (left + right) >>> 1
    const x = a[left]
    const y = a[mid]
    const z = a[right]
    const pivot = x < y ? (y < z ? y : x < z ? z : x) : x < z ? x : y < z ? z : y
    let i = left
    let j = right
    while (i <= j) {
      while (a[i] < pivot) i++
      while (a[j] > pivot) j--
      if (i <= j) {
        const t = a[i]
        a[i] = a[j]
        a[j] = t
        i++
        j--
      }
    }
    if (k <= j) right = j
    else if (k >= i) left = i
    else return
  }
}
