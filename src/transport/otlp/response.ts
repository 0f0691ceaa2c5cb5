import type { OtlpSignal } from './batch.js'
import { ExportLogsServiceResponse, ExportMetricsServiceResponse, ExportTraceServiceResponse } from './proto.js'

/** What an export answers beside success: how many items were refused, and why (OTLP partial success). */
export interface PartialSuccess {
  rejected: number
  errorMessage: string
}

const RESPONSES = {
  traces: { type: ExportTraceServiceResponse, count: 'rejectedSpans' },
  logs: { type: ExportLogsServiceResponse, count: 'rejectedLogRecords' },
  metrics: { type: ExportMetricsServiceResponse, count: 'rejectedDataPoints' },
} as const

const EMPTY = new Uint8Array(0)

/**
 * The Export*ServiceResponse message of a signal, encoded. Full success is the empty message;
 * `partial_success` is set only when something was refused or there is a message to give
 * (the specification's rule: an empty partial_success means full success).
 */
export function encodeExportResponse(signal: OtlpSignal, partial?: PartialSuccess): Uint8Array {
  if (!partial || (partial.rejected === 0 && partial.errorMessage === '')) return EMPTY
  const { type, count } = RESPONSES[signal]
  return type.encode(type.create({ partialSuccess: { [count]: partial.rejected, errorMessage: partial.errorMessage } })).finish()
}
