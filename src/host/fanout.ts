import type { Batch, Consumer, SpanInterest } from '../core/consumer.js'
import { FanoutError, type BranchOutcome } from '../core/errors.js'

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
          b.consumer.consume(anyMutates && i < branches.length - 1 ? { items: structuredClone(batch.items), ctx: batch.ctx } : batch),
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
