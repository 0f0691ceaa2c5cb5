import type { Logger } from 'pino'
import type { AnalyticsIndex } from '../../domain/analytics/index.js'
import type { UsageRecords } from '../../ports/usage.js'

/**
 * Follows `meterd reprice`, which prices records in another process: every `everyMs`, if the
 * store's count of unpriced records is not what this process's own additions explain, the
 * records the index holds as unpriced that left that list are read again and their rows take
 * the new cost. Counting is one native range count; the full comparison runs only when the
 * count moved, and costs one pass over the unpriced list.
 */
export class RepriceWatch {
  private lastCount = -1
  private timer?: NodeJS.Timeout

  constructor(private readonly usage: UsageRecords, private readonly index: AnalyticsIndex, private readonly logger: Logger) {}

  start(everyMs: number): void {
    this.timer = setInterval(() => {
      try {
        this.poll()
      } catch (err) {
        this.logger.warn({ err }, 'analytics: checking for repriced records failed; trying again')
      }
    }, everyMs)
    this.timer.unref()
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer)
  }

  /** One check; returns how many rows took a new price. */
  poll(): number {
    const added = this.index.takeAdded()
    if (this.index.unpricedCount === 0) {
      this.lastCount = -1
      return 0
    }
    // The store's list of records stored unpriced: `meterd reprice` takes a record off it when it prices it.
    const count = this.usage.unpricedCount()
    if (this.lastCount >= 0 && count === this.lastCount + added) {
      this.lastCount = count
      return 0
    }
    this.lastCount = count
    const still = new Set<string>()
    for (const id of this.usage.unpricedIds()) if (this.index.isUnpriced(id)) still.add(id)
    let repriced = 0
    for (const id of [...this.index.unpricedIds()]) {
      if (still.has(id)) continue
      const r = this.usage.get(id)
      if (r === undefined) this.index.forget(id)
      else if (r.cost?.source !== 'unpriced') {
        this.index.refresh(r)
        repriced++
      }
    }
    if (repriced > 0) this.logger.info({ repriced }, 'analytics: repriced records updated')
    return repriced
  }
}
