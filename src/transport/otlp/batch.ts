import type { SpanInterest } from '../../core/consumer.js'
import type { LogItem, SpanItem } from '../../model/otlp.js'

/** The three OTLP signals; meterd turns traces and logs into usage and counts metrics. */
export type OtlpSignal = 'traces' | 'logs' | 'metrics'

/** An item the decoder could not accept: where it was in the request, and why. */
export interface ItemRejection {
  /** The item's place in the request, e.g. `resourceSpans[0].scopeSpans[1].spans[3]`. */
  path: string
  message: string
}

/**
 * How many refused items a decoded request describes by path and reason; the others are only
 * counted. An export of a million bad spans makes a count, not a million paths and messages
 * (docs/otlp.md, "Floods").
 */
export const REJECTIONS_DESCRIBED = 100

/** How many of them an answer's `error_message` names, before "and K more". */
export const REJECTIONS_SHOWN = 5

interface DecodedBase {
  /** The first REJECTIONS_DESCRIBED of the items refused one by one; the rest of the request stands (OTLP partial success). */
  rejected: ItemRejection[]
  /** How many items were refused one by one (rejected describes the first few). */
  rejectedCount: number
  /**
   * Where each accepted item was (spans: every accepted span, read or not), as resource, scope and
   * item index, three numbers an item: a pipeline's refusal names the item by its path (itemPath).
   */
  places?: number[]
  /**
   * API keys found in the resource attributes named by DecodeOptions.apiKeyAttributes, distinct,
   * in order. Those attributes are removed from the items, so a key is never stored or forwarded.
   */
  apiKeys: string[]
}

export interface DecodedTraces extends DecodedBase {
  signal: 'traces'
  /** The accepted spans as items: all of them, or with DecodeOptions.spans only those the consumer reads. */
  items: SpanItem[]
  /** Spans accepted: the items and the spans passed over unread. */
  accepted: number
  /** With DecodeOptions.spans: item i was accepted span `positions[i]` (BatchContext.filtered). */
  positions?: number[]
}

export interface DecodedLogs extends DecodedBase {
  signal: 'logs'
  items: LogItem[]
}

/** Metrics are accepted and counted, not decoded further (DESIGN: nothing meters from them yet). */
export interface DecodedMetrics extends DecodedBase {
  signal: 'metrics'
  dataPoints: number
}

export type DecodedRequest = DecodedTraces | DecodedLogs | DecodedMetrics

export interface DecodeOptions {
  /** Resource attributes that carry an API key (`<prefix>api_key` for each attribution prefix). */
  apiKeyAttributes?: readonly string[]
  /**
   * The spans the traces consumer reads (Consumer.spanInterest): only those become items; the
   * others are checked as every span is (ids, the message itself) and counted, not decoded.
   */
  spans?: SpanInterest
}

/** The path of accepted item `k` (`resourceSpans[0].scopeSpans[0].spans[1]`), as the decoder names the items it refuses. */
export function itemPath(d: DecodedRequest, k: number): string {
  const p = d.places
  if (d.signal === 'metrics' || !p || 3 * k + 2 >= p.length) return `item ${k}`
  return (d.signal === 'traces' ? spanPath : logPath)(p[3 * k], p[3 * k + 1], p[3 * k + 2])
}

export const spanPath = (r: number, s: number, i: number): string => `resourceSpans[${r}].scopeSpans[${s}].spans[${i}]`
export const logPath = (r: number, s: number, i: number): string => `resourceLogs[${r}].scopeLogs[${s}].logRecords[${i}]`

/** Counts one more refused item of `d`; true while it is among the first REJECTIONS_DESCRIBED, whose path and reason the caller then adds. */
export function describeRejection(d: { rejectedCount: number }): boolean {
  return d.rejectedCount++ < REJECTIONS_DESCRIBED
}

/** How many items a decoded request holds (spans, log records or metric data points). */
export function itemCount(d: DecodedRequest): number {
  return d.signal === 'metrics' ? d.dataPoints : d.signal === 'traces' ? d.accepted : d.items.length
}

/** The `error_message` of a partial success: the first few of `total` refusals (`described`), and how many more there were. */
export function rejectionMessage(described: readonly { path?: string; message: string }[], total = described.length): string {
  const parts = described.slice(0, REJECTIONS_SHOWN).map((r) => (r.path ? `${r.path}: ${r.message}` : r.message))
  const more = total - parts.length
  return more > 0 ? `${parts.join('; ')}; and ${more} more` : parts.join('; ')
}
