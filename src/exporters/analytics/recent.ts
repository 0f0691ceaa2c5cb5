/**
 * The ids of the records a worker's analytics took in over the last `keepMs`, so that a record is
 * added once whichever way it arrives: committed here, announced by another worker, or found in
 * the store after another worker died (see AnalyticsExporter.reconcile). Ids are kept in one-second
 * generations, and a whole generation goes at once: no timer or entry per id.
 */
export class RecentIds {
  private readonly ids = new Set<string>()
  private readonly generations: string[][] = [[]]
  private readonly timer: NodeJS.Timeout

  constructor(keepMs: number) {
    const kept = Math.max(1, Math.ceil(keepMs / 1000))
    this.timer = setInterval(() => {
      this.generations.push([])
      while (this.generations.length > kept + 1) for (const id of this.generations.shift()!) this.ids.delete(id)
    }, 1000)
    this.timer.unref()
  }

  /** True the first time `id` is seen within the window: then the caller adds the record. */
  claim(id: string): boolean {
    if (this.ids.has(id)) return false
    this.ids.add(id)
    this.generations[this.generations.length - 1].push(id)
    return true
  }

  get size(): number {
    return this.ids.size
  }

  stop(): void {
    clearInterval(this.timer)
  }
}
