import type { Batch, BatchContext, ItemRejection } from './consumer.js'

/**
 * A part of a batch (items a filter kept, the items of one route) as a batch of its own. It shares
 * the request's context — caller, idempotency, the one write unit, the ids the store kept — except
 * for item rejections, which name indexes into the part: `settle()` maps them back to the
 * indexes of the whole batch (OTLP partial success names the client's items).
 */
export function partOf<T>(batch: Batch<any>, items: T[], index: readonly number[]): { part: Batch<T>; settle(): void } {
  const whole = batch.ctx
  const ctx: BatchContext = { ...whole, rejected: undefined }
  Object.defineProperty(ctx, 'unit', { enumerable: true, get: () => whole.unit, set: (u) => void (whole.unit = u) })
  Object.defineProperty(ctx, 'duplicates', {
    enumerable: true,
    get: () => whole.duplicates,
    // Two parts may each store records the store found stored already: keep both answers.
    set: (d: Map<string, string>) => void (whole.duplicates = whole.duplicates && whole.duplicates !== d ? new Map([...whole.duplicates, ...d]) : d),
  })
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
