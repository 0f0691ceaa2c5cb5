import type { Logger } from 'pino'
import type { AnalyticsIndex } from '../../domain/analytics/index.js'
import type { Store } from '../../store/store.js'

// The store's index of records stored unpriced: ['u', team, kind, eventTime, id]
// (src/store/usage-store.ts); `meterd reprice` removes a record's entry when it prices it.
const START = ['u']
const END = ['u', '\uffff']

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

  constructor(private readonly store: Store, private readonly index: AnalyticsIndex, private readonly logger: Logger) {}

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
    const { index, records } = this.store.usage
    const count = index.getKeysCount({ start: START, end: END })
    if (this.lastCount >= 0 && count === this.lastCount + added) {
      this.lastCount = count
      return 0
    }
    this.lastCount = count
    const still = new Set<string>()
    for (const key of index.getKeys({ start: START, end: END })) {
      const id = key[key.length - 1] as string
      if (this.index.isUnpriced(id)) still.add(id)
    }
    let repriced = 0
    for (const id of [...this.index.unpricedIds()]) {
      if (still.has(id)) continue
      const r = records.get(id)
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
