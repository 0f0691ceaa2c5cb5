/**
 * The ids of the records a worker's analytics took in lately, so that a record is added once
 * whichever way it arrives: committed here, announced by another worker, or found in the store
 * after another worker died (see AnalyticsExporter.reconcile). Ids are kept in one-second
 * generations, and a whole generation goes at once: no timer or entry per id.
 *
 * A generation goes once it is older than `keepMs` and ended before `keepSince()` (ms since the
 * epoch): a read-back only looks at records made at or after that time, and a record is taken in
 * after it was made, so an id taken in before then cannot be met again.
 */
export class RecentIds {
  private readonly ids = new Set<string>()
  /** Each generation's ids, and when it began. */
  private readonly generations: { since: number; ids: string[] }[]
  private readonly timer: NodeJS.Timeout

  constructor(keepMs: number, keepSince: () => number = () => Infinity, now: () => number = Date.now) {
    this.generations = [{ since: now(), ids: [] }]
    this.timer = setInterval(() => {
      const at = now()
      this.generations.push({ since: at, ids: [] })
      // A second of margin for the clock's steps.
      const before = Math.min(at - keepMs, keepSince() - 1000)
      // generations[1].since: when the oldest generation ended.
      while (this.generations.length > 1 && this.generations[1].since < before) for (const id of this.generations.shift()!.ids) this.ids.delete(id)
    }, 1000)
    this.timer.unref()
  }

  /** True the first time `id` is seen within the window: then the caller adds the record. */
  claim(id: string): boolean {
    if (this.ids.has(id)) return false
    this.ids.add(id)
    this.generations[this.generations.length - 1].ids.push(id)
    return true
  }

  get size(): number {
    return this.ids.size
  }

  stop(): void {
    clearInterval(this.timer)
  }
}
