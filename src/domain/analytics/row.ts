import type { UsageRecord } from '../../model/usage-record.js'
import { ERROR, TOKENS, TOOL, type RowValues } from './block.js'
import { DIMENSIONS } from './dimensions.js'
import { parseUnits } from './units.js'

/** A record as analytics keeps it: its row's values, its dimension values (normalised) and its traceId. */
export interface RowInput extends Omit<RowValues, 'tuple' | 'trace'> {
  dims: string[]
  traceId: string
}

const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : 0)
const ms = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : NaN)

/**
 * What a stored record contributes, or undefined when it must not count (its tool was disabled:
 * `cost.metered` false). Errors: a completion whose stopReason is ERROR, a tool event with
 * `success: false`. Time to first token: `timeToFirstToken` when positive, else
 * completionStartTime − requestTime when positive, else unknown (clients send 0 for "not
 * measured", wire-contract §1.3).
 */
export function rowOf(r: UsageRecord): RowInput | undefined {
  if (r.cost?.metered === false) return undefined
  const a = r.attribution
  const tokens = new Array<number>(TOKENS).fill(0)
  let flags = 0
  let duration: number
  let ttft = NaN
  let provider = ''
  let model = ''
  let toolId = ''
  if (r.kind === 'completion') {
    const b = r.body
    provider = typeof b.provider === 'string' ? b.provider.toLowerCase() : ''
    model = typeof b.model === 'string' ? b.model : ''
    if (b.stopReason === 'ERROR') flags |= ERROR
    duration = ms(b.requestDuration)
    const sent = ms(b.timeToFirstToken)
    if (sent > 0) ttft = sent
    else if (typeof b.completionStartTime === 'string' && typeof b.requestTime === 'string') {
      const d = Date.parse(b.completionStartTime) - Date.parse(b.requestTime)
      if (d > 0) ttft = d
    }
    tokens[0] = num(b.inputTokenCount)
    tokens[1] = num(b.outputTokenCount)
    tokens[2] = num(b.reasoningTokenCount)
    tokens[3] = num(b.cacheReadTokenCount)
    tokens[4] = num(b.cacheCreationTokenCount)
    tokens[5] = num(b.totalTokenCount)
  } else {
    const b = r.body
    flags |= TOOL
    toolId = b.toolId
    if (b.success === false) flags |= ERROR
    duration = ms(b.durationMs)
  }
  const dims = new Array<string>(DIMENSIONS.length)
  dims[0] = a.organizationName
  dims[1] = a.productName
  dims[2] = a.subscriberId
  dims[3] = a.subscriberCredentialName
  dims[4] = a.agent
  dims[5] = provider
  dims[6] = model
  dims[7] = toolId
  dims[8] = a.environment
  return { time: Date.parse(r.eventTime), dims, traceId: a.traceId, cost: costUnits(r), flags, duration, ttft, tokens }
}

/** The record's cost in units; 0 without a cost (a pipeline without pricing) or an unreadable one. */
export function costUnits(r: UsageRecord): number | bigint {
  const total = r.cost?.total
  if (typeof total !== 'string') return 0
  return parseUnits(total) ?? 0
}
