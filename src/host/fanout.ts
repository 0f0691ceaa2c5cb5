import type { Batch, Consumer, SpanInterest } from '../core/consumer.js'
import { Copies } from '../core/copies.js'
import { FanoutError, type BranchOutcome } from '../core/errors.js'
import { partOf, select } from '../core/part.js'

export interface Branch {
  id: string
  consumer: Consumer<any>
  mutatesData: boolean
}

/**
 * Hands one batch to several consumers at once and reports per-branch outcomes
 * (FanoutError) instead of the first failure, so a caller — or a retry sender in front
 * of a branch — knows exactly which branch must see the data again.
 */
export function fanout(branches: Branch[]): Consumer<any> {
  if (branches.length === 1) return branches[0].consumer
  const anyMutates = branches.some((b) => b.mutatesData)
  return {
    // The spans some branch reads: all of them as soon as one branch reads every span.
    get spanInterest(): SpanInterest | undefined {
      const prefixes: string[] = []
      for (const b of branches) {
        const interest = b.consumer.spanInterest
        if (!interest) return undefined
        prefixes.push(...interest.attributePrefixes)
      }
      return { attributePrefixes: [...new Set(prefixes)] }
    },
    async consume(batch: Batch<any>): Promise<void> {
      const results = await Promise.allSettled(
        branches.map((b, i) =>
          // A branch that changes data gets its own copy; the last branch may keep the original.
          b.consumer.consume(anyMutates && i < branches.length - 1 ? { items: copiesOf(batch), ctx: batch.ctx } : batch),
        ),
      )
      if (results.every((r) => r.status === 'fulfilled')) return
      const outcomes: BranchOutcome[] = results.map((r, i) => ({
        id: branches[i].id,
        error: r.status === 'rejected' ? (r.reason as Error) : undefined,
      }))
      throw new FanoutError(outcomes)
    },
  }
}

/** A copy of the batch's items for another pipeline, noted as copies (Copies) for the components the pipelines share. */
function copiesOf(batch: Batch<any>): unknown[] {
  const items = structuredClone(batch.items)
  const copies = (batch.ctx.copies ??= new Copies())
  for (let i = 0; i < items.length; i++) copies.add(batch.items[i], items[i])
  return items
}

/**
 * A component that several pipelines of one signal hand batches to (an exporter both routes of a
 * routing connector end in): of the copies of an item that went down several of them, it takes
 * the first to reach it and passes over the others, so it stores, counts or sends the item once
 * (Copies). A batch without copies — each item went one way — goes on as it is.
 */
export function takeOnce(consumer: Consumer<any>): Consumer<any> {
  return {
    get spanInterest(): SpanInterest | undefined {
      return consumer.spanInterest
    },
    consume(batch: Batch<any>): Promise<void> {
      const copies = batch.ctx.copies
      return copies === undefined ? consumer.consume(batch) : takeFirst(consumer, copies, batch)
    },
  }
}

/** The items of the batch of which `consumer` has taken no copy yet, handed to it. */
async function takeFirst(consumer: Consumer<any>, copies: Copies, batch: Batch<any>): Promise<void> {
  const fresh = select(batch.items, (item) => copies.claim(consumer, item))
  if (!fresh) return consumer.consume(batch)
  if (fresh.items.length === 0) return
  const { part, settle } = partOf(batch, fresh.items, fresh.index)
  try {
    await consumer.consume(part)
  } finally {
    settle()
  }
}
