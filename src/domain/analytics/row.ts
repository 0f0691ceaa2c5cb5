import { isModelKind, type UsageRecord } from '../../model/usage-record.js'
import { ERROR, TOKENS, TOOL } from './block.js'
import { DIM, DIMENSIONS } from './dimensions.js'
import { parseUnits } from './units.js'

/** A record as analytics reads it: its row's values, its dimension values (normalised) and its traceId. */
export class RowInput {
  time = 0
  /** Units (units.ts). */
  cost: number | bigint = 0
  flags = 0
  /** ms; NaN when unknown. */
  duration = NaN
  /** ms; NaN when unknown. */
  ttft = NaN
  readonly tokens = new Float64Array(TOKENS)
  /** In DIMENSIONS order. */
  readonly dims: string[] = new Array<string>(DIMENSIONS.length).fill('')
  traceId = ''
}

const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : 0)
const ms = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : NaN)

/**
 * Reads what a stored record contributes (media records count like completions: a model, a
 * provider, a cost, no tokens) into `row` (reused from record to record: nothing is
 * allocated per record); false when it must not count (its tool was disabled: `cost.metered`
 * false). Errors: a completion whose stopReason is ERROR, a tool event with `success: false`.
 * Time to first token: `timeToFirstToken` when positive, else completionStartTime − requestTime
 * when positive, else unknown (clients send 0 for "not measured", wire-contract §1.3).
 */
export function readRow(r: UsageRecord, row: RowInput): boolean {
  if (r.cost?.metered === false) return false
  const a = r.attribution
  const dims = row.dims
  const tokens = row.tokens
  row.flags = 0
  row.ttft = NaN
  if (isModelKind(r.kind)) {
    // Completions and image, audio and video records (their token counts are absent: 0).
    const b = r.body as Record<string, unknown>
    dims[DIM.provider] = typeof b.provider === 'string' ? b.provider.toLowerCase() : ''
    dims[DIM.model] = typeof b.model === 'string' ? b.model : ''
    dims[DIM.toolId] = ''
    if (b.stopReason === 'ERROR') row.flags |= ERROR
    row.duration = ms(b.requestDuration)
    const sent = ms(b.timeToFirstToken)
    if (sent > 0) row.ttft = sent
    else if (typeof b.completionStartTime === 'string' && typeof b.requestTime === 'string') {
      const d = Date.parse(b.completionStartTime) - Date.parse(b.requestTime)
      if (d > 0) row.ttft = d
    }
    tokens[0] = num(b.inputTokenCount)
    tokens[1] = num(b.outputTokenCount)
    tokens[2] = num(b.reasoningTokenCount)
    tokens[3] = num(b.cacheReadTokenCount)
    tokens[4] = num(b.cacheCreationTokenCount)
    tokens[5] = num(b.totalTokenCount)
  } else {
    const b = r.body
    row.flags |= TOOL
    if (b.success === false) row.flags |= ERROR
    row.duration = ms(b.durationMs)
    dims[DIM.provider] = ''
    dims[DIM.model] = ''
    dims[DIM.toolId] = typeof b.toolId === 'string' ? b.toolId : ''
    tokens.fill(0)
  }
  dims[DIM.organizationName] = a.organizationName
  dims[DIM.productName] = a.productName
  dims[DIM.subscriberId] = a.subscriberId
  dims[DIM.subscriberCredentialName] = a.subscriberCredentialName
  dims[DIM.agent] = a.agent
  dims[DIM.environment] = a.environment
  row.traceId = a.traceId
  row.time = Date.parse(r.eventTime)
  row.cost = costUnits(r)
  return true
}

/** The record's cost in units; 0 without a cost (a pipeline without pricing) or an unreadable one. */
export function costUnits(r: UsageRecord): number | bigint {
  const total = r.cost?.total
  if (typeof total !== 'string') return 0
  return parseUnits(total) ?? 0
}

/**
 * A row as one worker hands it to the others (issue 19 §1): every worker keeps the analytics of
 * every record, and reading another worker's record back from LMDB and decoding all of it cost
 * more than the row itself. A row is PEER_STRIDE values appended to a flat list, sent as one
 * JSON text: id, team, unpriced (0/1), time, cost (units: a number, or a bigint's digits),
 * flags, duration and ttft (null when unknown), the token counts, the dimensions, the traceId.
 */
export const PEER_STRIDE = 8 + TOKENS + DIMENSIONS.length + 1

/** Appends `row` (read from record `id` of `team`) to `out`. */
export function pushPeerRow(out: unknown[], id: string, team: string, unpriced: boolean, row: RowInput): void {
  out.push(
    id,
    team,
    unpriced ? 1 : 0,
    row.time,
    typeof row.cost === 'bigint' ? row.cost.toString() : row.cost,
    row.flags,
    Number.isNaN(row.duration) ? null : row.duration,
    Number.isNaN(row.ttft) ? null : row.ttft,
  )
  for (let k = 0; k < TOKENS; k++) out.push(row.tokens[k])
  for (let k = 0; k < DIMENSIONS.length; k++) out.push(row.dims[k])
  out.push(row.traceId)
}

/** Reads the row at `at` of a list `pushPeerRow` filled (after its JSON round trip) into `row`. */
export function readPeerRow(list: unknown[], at: number, row: RowInput): { id: string; team: string; unpriced: boolean } {
  let i = at + 3
  row.time = list[i++] as number
  const cost = list[i++] as number | string
  row.cost = typeof cost === 'string' ? BigInt(cost) : cost
  row.flags = list[i++] as number
  row.duration = (list[i++] as number | null) ?? NaN
  row.ttft = (list[i++] as number | null) ?? NaN
  for (let k = 0; k < TOKENS; k++) row.tokens[k] = list[i++] as number
  for (let k = 0; k < DIMENSIONS.length; k++) row.dims[k] = list[i++] as string
  row.traceId = list[i] as string
  return { id: list[at] as string, team: list[at + 1] as string, unpriced: list[at + 2] === 1 }
}
