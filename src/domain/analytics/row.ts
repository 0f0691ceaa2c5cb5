import { msOfIso } from '../../core/iso-time.js'
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
      // msOfIso is Date.parse, quicker for the canonical spelling records carry.
      const d = msOfIso(b.completionStartTime) - msOfIso(b.requestTime)
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
  row.time = msOfIso(r.eventTime)
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
 * Rows as one worker hands them to the others (issue 19 §1): every worker keeps the analytics
 * of every record, and reading another worker's record back from LMDB and decoding all of it
 * cost more than the row itself. A batch is one JSON text, `[strings, values]`: each row is
 * PEER_STRIDE values — id, team, unpriced (0/1), time, cost (units: a number, or a bigint's
 * digits), flags, duration and ttft (null when unknown), the token counts, the dimensions and
 * the traceId — where team, dimensions and traceId are indexes into `strings`, which holds each
 * distinct string of the batch once (a client's records repeat the same few). The text has few
 * quotes, so the IPC hops that carry it as a string copy it rather than escape it.
 */
const PEER_STRIDE = 8 + TOKENS + DIMENSIONS.length + 1

export class PeerRows {
  private strings: string[] = []
  private codes = new Map<string, number>()
  private values: unknown[] = []

  get empty(): boolean {
    return this.values.length === 0
  }

  /** Adds `row` (read from record `id` of `team`). */
  push(id: string, team: string, unpriced: boolean, row: RowInput): void {
    const v = this.values
    v.push(
      id,
      this.code(team),
      unpriced ? 1 : 0,
      row.time,
      typeof row.cost === 'bigint' ? row.cost.toString() : row.cost,
      row.flags,
      Number.isNaN(row.duration) ? null : row.duration,
      Number.isNaN(row.ttft) ? null : row.ttft,
    )
    for (let k = 0; k < TOKENS; k++) v.push(row.tokens[k])
    for (let k = 0; k < DIMENSIONS.length; k++) v.push(this.code(row.dims[k]))
    v.push(this.code(row.traceId))
  }

  /** The batch as one JSON text; the batch is empty after. */
  take(): string {
    const text = JSON.stringify([this.strings, this.values])
    this.strings = []
    this.codes = new Map()
    this.values = []
    return text
  }

  private code(s: string): number {
    let c = this.codes.get(s)
    if (c === undefined) {
      c = this.strings.length
      this.strings.push(s)
      this.codes.set(s, c)
    }
    return c
  }
}

/** Calls `fn` for each row of a batch `PeerRows.take()` wrote, read into `row` (reused). */
export function readPeerRows(text: string, row: RowInput, fn: (id: string, team: string, unpriced: boolean) => void): void {
  const [strings, list] = JSON.parse(text) as [string[], unknown[]]
  for (let at = 0; at + PEER_STRIDE <= list.length; at += PEER_STRIDE) {
    let i = at + 3
    row.time = list[i++] as number
    const cost = list[i++] as number | string
    row.cost = typeof cost === 'string' ? BigInt(cost) : cost
    row.flags = list[i++] as number
    row.duration = (list[i++] as number | null) ?? NaN
    row.ttft = (list[i++] as number | null) ?? NaN
    for (let k = 0; k < TOKENS; k++) row.tokens[k] = list[i++] as number
    for (let k = 0; k < DIMENSIONS.length; k++) row.dims[k] = strings[list[i++] as number]
    row.traceId = strings[list[i] as number]
    fn(list[at] as string, strings[list[at + 1] as number], list[at + 2] === 1)
  }
}
