import { hash } from 'node:crypto'
import { isoAt } from '../../core/iso-time.js'
import { attributionFields, keptAttributes } from './attribution.js'
import { restCounts, type CacheCounting, type ReportedUsage } from './tokens.js'
import { ItemRejected, type AttributeView } from './view.js'

/** What a mapping needs from the connector's config and the running daemon. */
export interface MapSettings {
  prefixes: readonly string[]
  drop: readonly string[]
  apiKeys: readonly string[]
  /** Whether a tool is registered for the caller's team (execute_tool spans become tool events only then). */
  isRegisteredTool(toolId: string): boolean
}

/** One usage record's body in REST field names, and its kind. */
export interface Mapped {
  kind: 'completion' | 'tool'
  body: Record<string, unknown>
}

/** What a source says about one completion, before it becomes a REST body. */
export interface CompletionDraft {
  model: string
  provider: string
  usage: ReportedUsage
  counting: CacheCounting
  operationType: string
  finishReason?: string
  streamed?: boolean
  timeToFirstTokenMs?: number
  /** An error the source reported (error.type, a span status message, an API error text). */
  error?: string
}

/** When the call started and ended, in milliseconds since the epoch. */
export interface Times {
  startMs: number
  endMs: number
}

/** Nanoseconds since the epoch (a decimal string) → milliseconds, keeping the sub-millisecond part. */
export function nanosToMs(nanos: string): number {
  const n = nanos.length
  // The usual 19 digits, read digit by digit: both parts are integers below 2^53, so each sum is
  // exact and the result is the same double as Number() of the two slices, without the two
  // substrings and the string-to-number conversions (about 2,000 instructions a call).
  if (n > 6 && n <= 21) {
    let ms = 0
    let i = 0
    for (; i < n - 6; i++) {
      const d = nanos.charCodeAt(i) - 48
      if (d < 0 || d > 9) break
      ms = ms * 10 + d
    }
    let rest = 0
    for (; i < n; i++) {
      const d = nanos.charCodeAt(i) - 48
      if (d < 0 || d > 9) break
      rest = rest * 10 + d
    }
    if (i === n) return ms + rest / 1e6
  }
  if (n <= 6) return Number(nanos) / 1e6
  return Number(nanos.slice(0, -6)) + Number(nanos.slice(-6)) / 1e6
}

/** The largest distance from the epoch a Date holds, in ms. */
const MAX_DATE_MS = 8.64e15

/** Milliseconds since the epoch (the sub-millisecond part dropped) → `Date#toISOString()` text, without Date's costly formatter. */
export const iso = (ms: number): string => isoAt(Math.floor(ms))

/** Provider finish reasons → the REST stopReason (the mapping REST clients use, wire-contract §1.4). */
const STOP: Record<string, string> = {
  stop: 'END', end_turn: 'END', pause_turn: 'END', end: 'END', complete: 'END', completed: 'END', finish_reason_stop: 'END',
  length: 'TOKEN_LIMIT', max_tokens: 'TOKEN_LIMIT', model_context_window_exceeded: 'TOKEN_LIMIT', max_output_tokens: 'TOKEN_LIMIT',
  tool_calls: 'END_SEQUENCE', 'tool-calls': 'END_SEQUENCE', function_call: 'END_SEQUENCE', tool_use: 'END_SEQUENCE', stop_sequence: 'END_SEQUENCE',
  content_filter: 'ERROR', 'content-filter': 'ERROR', safety: 'ERROR', refusal: 'ERROR', error: 'ERROR', recitation: 'ERROR', blocklist: 'ERROR', prohibited_content: 'ERROR', spii: 'ERROR',
  timeout: 'TIMEOUT', cancelled: 'CANCELLED', canceled: 'CANCELLED', cost_limit: 'COST_LIMIT', completion_limit: 'COMPLETION_LIMIT',
}

export function stopReason(finish: string | undefined, failed: boolean): string {
  if (failed) return 'ERROR'
  if (finish === undefined) return 'END'
  return STOP[finish.trim().toLowerCase()] ?? 'END'
}

const TRANSACTION_KEYS = ['transaction_id', 'request_id', 'gen_ai.response.id'] as const

/**
 * The record's transactionId, the dedup anchor (a retried export stores each record once):
 * `transaction_id`, `request_id`, `gen_ai.response.id` (or a source's own response id), else a
 * stable hash of what identifies the item (trace id + span id, or the log record).
 */
export function transactionId(v: AttributeView, extra: readonly string[], fallback: () => string): string {
  const id = v.stringOf(TRANSACTION_KEYS) ?? v.stringOf(extra)
  if (id === undefined) return digest(fallback())
  return id.length <= 255 ? id : digest(id)
}

/** 32 hex characters of a sha256: the shape of the vendor backfill's transaction ids. */
export function digest(text: string): string {
  return hash('sha256', text, 'hex').slice(0, 32)
}

/** A completion's REST body: counts in the REST meaning, times, stop reason, and the fields every client sends. */
export function completionBody(d: CompletionDraft, t: Times): Record<string, unknown> {
  if (!(t.endMs >= t.startMs)) throw new ItemRejected('the end time is before the start time')
  // A date ends at ±8.64e15 ms: past it the ISO text cannot be written (a RangeError, a 503 the
  // exporter retries for ever). A duration_ms of 1e20 before a record's time takes its start there.
  if (!(t.startMs >= -MAX_DATE_MS && t.endMs <= MAX_DATE_MS))
    throw new ItemRejected(`the call's times are out of range: it starts ${Math.round(t.endMs - t.startMs)} ms before it ends`)
  const counts = restCounts(d.usage, d.counting, d.provider, d.model)
  const body: Record<string, unknown> = {
    model: d.model,
    provider: d.provider,
    ...counts,
    stopReason: stopReason(d.finishReason, d.error !== undefined),
    requestTime: iso(t.startMs),
    completionStartTime: iso(d.timeToFirstTokenMs !== undefined ? Math.min(t.endMs, t.startMs + d.timeToFirstTokenMs) : t.endMs),
    responseTime: iso(t.endMs),
    requestDuration: Math.round(t.endMs - t.startMs),
    costType: 'AI',
    operationType: d.operationType,
  }
  if (d.streamed !== undefined) body.isStreamed = d.streamed
  if (d.timeToFirstTokenMs !== undefined) body.timeToFirstToken = Math.round(d.timeToFirstTokenMs)
  if (d.error !== undefined) body.errorReason = d.error
  return body
}

/**
 * What every record gets last: the client's own cost of a completion (`cost_usd`, or
 * `cost_usd_micros`) as `clientCostUsd`, kept beside the price-book cost (it does not replace
 * it, unlike REST's totalCost); the attribution fields; and the attributes no mapping read.
 */
export function finishBody(kind: Mapped['kind'], body: Record<string, unknown>, v: AttributeView, s: MapSettings): Mapped {
  if (kind === 'completion') {
    const micros = v.amount('cost_usd_micros')
    const cost = v.amount('cost_usd') ?? (micros !== undefined ? micros / 1e6 : undefined)
    if (cost !== undefined) body.clientCostUsd = cost
  }
  Object.assign(body, attributionFields(v, s.prefixes))
  const kept = keptAttributes(v, s.drop, s.apiKeys)
  if (kept) body.attributes = kept
  return { kind, body }
}
