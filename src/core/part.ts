import type { Batch, BatchContext, ItemRejection } from './consumer.js'
import type { WriteUnit } from '../ports/write-unit.js'
import type { Caller } from '../model/usage-record.js'
import type { Copies } from './copies.js'

/**
 * The context of a part of a batch (the items a filter kept, one route's items): the request's
 * own — caller, idempotency, the one write unit, the ids the store kept, the copies a fan-out
 * made — read and written through, except for item rejections, which name indexes into the part
 * (see partOf). A field added to BatchContext must be forwarded here too.
 */
class PartContext implements BatchContext {
  rejected?: ItemRejection[] = undefined

  constructor(private readonly whole: BatchContext) {}

  get caller(): Caller | undefined {
    return this.whole.caller
  }
  get idempotency(): BatchContext['idempotency'] {
    return this.whole.idempotency
  }
  get receiver(): string | undefined {
    return this.whole.receiver
  }
  get dedupWindowMs(): number | undefined {
    return this.whole.dedupWindowMs
  }
  get unit(): WriteUnit | undefined {
    return this.whole.unit
  }
  set unit(u: WriteUnit | undefined) {
    this.whole.unit = u
  }
  get copies(): Copies | undefined {
    return this.whole.copies
  }
  set copies(c: Copies | undefined) {
    this.whole.copies = c
  }
  get duplicates(): ReadonlyMap<string, string> | undefined {
    return this.whole.duplicates
  }
  set duplicates(d: ReadonlyMap<string, string> | undefined) {
    // Two parts may each store records the store found stored already: keep both answers.
    const had = this.whole.duplicates
    this.whole.duplicates = had && d && had !== d ? new Map([...had, ...d]) : d
  }
}

/**
 * A part of a batch as a batch of its own, sharing the request's context; `settle()` maps the
 * part's item rejections back to indexes of the whole batch (OTLP partial success names the
 * client's items). `index[k]` is the whole batch's index of the part's item k.
 */
export function partOf<T>(batch: Batch<any>, items: T[], index: readonly number[]): { part: Batch<T>; settle(): void } {
  const whole = batch.ctx
  const ctx = new PartContext(whole)
  return {
    part: { items, ctx },
    settle() {
      if (!ctx.rejected?.length) return
      const rejected: ItemRejection[] = (whole.rejected ??= [])
      for (const r of ctx.rejected) {
        const i = index[r.index]
        if (i !== undefined && !rejected.some((x) => x.index === i)) rejected.push({ index: i, message: r.message })
      }
    },
  }
}

/**
 * The items `keep` says yes to, each with its index in `items` (for partOf), or undefined when it
 * keeps every one: then nothing is allocated, and the batch goes on as it is.
 */
export function select<T>(items: readonly T[], keep: (item: T) => boolean): { items: T[]; index: number[] } | undefined {
  let kept: T[] | undefined
  let index: number[] | undefined
  for (let i = 0; i < items.length; i++) {
    const yes = keep(items[i])
    if (yes && kept) {
      kept.push(items[i])
      index!.push(i)
    } else if (!yes && !kept) {
      // The first item left out: from here on the kept items are collected apart.
      kept = items.slice(0, i)
      index = kept.map((_, k) => k)
    }
  }
  return kept && { items: kept, index: index! }
}
