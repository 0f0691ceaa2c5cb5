import { percentiles } from './rank.js'

/**
 * Numbers collected per group during one pass (latencies per provider, say), then their
 * nearest-rank percentiles per group: values and their groups go into typed arrays, are laid
 * out group by group in one counting pass, and each group's run is selected in place. No
 * per-group arrays, no sort.
 */
export class GroupedValues {
  private values: Float64Array
  private groups: Int32Array
  private n = 0
  private readonly counts: Int32Array

  /** `expected`: how many values may come (a large buffer is only touched where written). */
  constructor(readonly groupCount: number, expected = 1024) {
    this.counts = new Int32Array(groupCount)
    this.values = new Float64Array(Math.max(16, expected))
    this.groups = new Int32Array(Math.max(16, expected))
  }

  push(group: number, value: number): void {
    if (this.n === this.values.length) this.grow()
    this.values[this.n] = value
    this.groups[this.n++] = group
    this.counts[group]++
  }

  /** For each group, its percentiles `ps` (ascending), null where it has no value. */
  percentiles(ps: readonly number[]): (number | null)[][] {
    const starts = new Int32Array(this.groupCount + 1)
    for (let g = 0; g < this.groupCount; g++) starts[g + 1] = starts[g] + this.counts[g]
    const laid = new Float64Array(this.n)
    const at = starts.slice(0, this.groupCount)
    for (let i = 0; i < this.n; i++) laid[at[this.groups[i]]++] = this.values[i]
    const out: (number | null)[][] = []
    for (let g = 0; g < this.groupCount; g++) out.push(percentiles(laid.subarray(starts[g], starts[g + 1]), ps))
    return out
  }

  private grow(): void {
    const values = new Float64Array(this.values.length * 2)
    values.set(this.values)
    const groups = new Int32Array(this.groups.length * 2)
    groups.set(this.groups)
    this.values = values
    this.groups = groups
  }
}
