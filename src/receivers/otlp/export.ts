import type { SignalConsumers } from '../../host/component.js'
import type { ComponentMetrics } from '../../core/telemetry.js'
import type { Batch } from '../../core/consumer.js'
import { PermanentError, invalid } from '../../core/errors.js'
import type { Caller } from '../../model/usage-record.js'
import { REJECTIONS_SHOWN, itemCount, itemPath, rejectionMessage, type DecodedRequest, type OtlpSignal } from '../../transport/otlp/batch.js'

/** What an export came to, for either transport's answer. */
export interface ExportOutcome {
  /** Items the pipelines took (spans and log records; metric data points are counted, not consumed). */
  processed: number
  /** Per signal: items refused by the decoder and by the pipelines, and why. */
  rejected: Partial<Record<OtlpSignal, { count: number; message: string }>>
}

/**
 * Hands one export's decoded signals to the pipelines that consume them (DESIGN §2: traces and
 * logs pipelines, whose genai connector makes usage records of them) and resolves once they are
 * durable. Items refused one by one (by the decoder or the connector) are reported, the rest
 * stored: OTLP's partial success. An export in which every item was refused is a 400.
 */
export interface ExportTarget {
  /** The receiver's component id (BatchContext.receiver). */
  receiver: string
  next: SignalConsumers
  metrics: ComponentMetrics
}

export async function exportSignals(caller: Caller, parts: DecodedRequest[], to: ExportTarget): Promise<ExportOutcome> {
  const outcome = await exportParts(caller, parts, to)
  to.metrics.accepted(outcome.processed)
  let refused = 0
  for (const r of Object.values(outcome.rejected)) refused += r!.count
  if (refused) to.metrics.refused(refused)
  return outcome
}

async function exportParts(caller: Caller, parts: DecodedRequest[], { receiver, next }: ExportTarget): Promise<ExportOutcome> {
  const outcome: ExportOutcome = { processed: 0, rejected: {} }
  let offered = 0
  let refused = 0
  for (const d of parts) {
    const total = itemCount(d) + d.rejectedCount
    offered += total
    // The decoder's described refusals, then the pipeline's, as many as the message shows (REJECTIONS_SHOWN); all are counted.
    const reasons: { path?: string; message: string }[] = [...d.rejected]
    let count = d.rejectedCount
    if (d.signal !== 'metrics' && next[d.signal]) {
      const batch: Batch<unknown> = { items: d.items, ctx: { caller, receiver } }
      // Spans the consumer does not read were left undecoded (DecodeOptions.spans): they count, unread.
      if (d.signal === 'traces' && d.positions) batch.ctx.filtered = { count: d.accepted, positions: d.positions }
      if (d.items.length > 0)
        try {
          await next[d.signal]!.consume(batch)
        } catch (err) {
          if (!(err instanceof PermanentError) || err.code !== 'invalid_otlp_items') throw err
          // Every usage item refused: say so naming the items by their paths in the request, as the
          // decoder names those it refused (the connector knows only their places in its batch).
          const refusals = batch.ctx.rejected ?? []
          const first = refusals[0]
          const more = refusals.length > 1 ? ` (and ${refusals.length - 1} more)` : ''
          const message = first ? `${itemPath(d, first.index)}: ${first.message}${more}` : err.message
          throw new PermanentError(d.rejectedCount ? `${message}; ${rejectionMessage(d.rejected, d.rejectedCount)}` : message, err.code, err.param, err.index)
        }
      const refusals = batch.ctx.rejected ?? []
      for (let k = 0; k < refusals.length && reasons.length < REJECTIONS_SHOWN; k++) reasons.push({ path: itemPath(d, refusals[k].index), message: refusals[k].message })
      count += refusals.length
      outcome.processed += itemCount(d) - refusals.length
    }
    if (count) {
      refused += count
      outcome.rejected[d.signal] = { count, message: rejectionMessage(reasons, count) }
    }
  }
  if (offered > 0 && refused === offered) {
    const first = Object.values(outcome.rejected)[0]!
    throw new PermanentError(`every item of the export was refused: ${first.message}`, 'invalid_otlp_items')
  }
  return outcome
}

/** A key from the payload is used only when the export names one key: a mix of keys is ambiguous. */
export function checkPayloadKeys(keys: readonly string[]): void {
  if (keys.length > 1)
    throw invalid('ambiguous_api_key', `the export carries ${keys.length} different api_key resource attributes; send one export per key, or the key in a header`)
}
