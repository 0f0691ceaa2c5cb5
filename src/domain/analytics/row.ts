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
 * cost more than the row itself. A batch is bytes: a header (u32 LE the number of rows, u32 LE
 * the byte length of the string table), then PEER_STRIDE doubles per row — time, cost (units;
 * NaN when it is a bigint, whose digits are then a string), the bigint's string or -1, flags,
 * duration and ttft (NaN when unknown), the token counts, unpriced (0/1), and the string codes of
 * id, team, the dimensions and the traceId — then the string table as a JSON array (each distinct
 * string once: a client's records repeat the same few). Numbers travel as they are, with no text
 * to write and parse: JSON of the numbers was most of what a batch cost its two ends.
 */
const PEER_STRIDE = 7 + TOKENS + 1 + 2 + DIMENSIONS.length + 1
const HEADER = 8

export class PeerRows {
  private strings: string[] = []
  private codes = new Map<string, number>()
  private values = new Float64Array(64 * PEER_STRIDE)
  private rows = 0

  get empty(): boolean {
    return this.rows === 0
  }

  /** Adds `row` (read from record `id` of `team`). */
  push(id: string, team: string, unpriced: boolean, row: RowInput): void {
    let v = this.values
    if ((this.rows + 1) * PEER_STRIDE > v.length) {
      v = new Float64Array(v.length * 2)
      v.set(this.values)
      this.values = v
    }
    let i = this.rows++ * PEER_STRIDE
    v[i++] = row.time
    if (typeof row.cost === 'bigint') {
      v[i++] = NaN
      v[i++] = this.code(row.cost.toString())
    } else {
      v[i++] = row.cost
      v[i++] = -1
    }
    v[i++] = row.flags
    v[i++] = row.duration
    v[i++] = row.ttft
    for (let k = 0; k < TOKENS; k++) v[i++] = row.tokens[k]
    v[i++] = unpriced ? 1 : 0
    v[i++] = this.code(id)
    v[i++] = this.code(team)
    for (let k = 0; k < DIMENSIONS.length; k++) v[i++] = this.code(row.dims[k])
    v[i] = this.code(row.traceId)
  }

  /** The batch as bytes; the batch is empty after. */
  take(): Buffer {
    const table = JSON.stringify(this.strings)
    const numbers = this.rows * PEER_STRIDE * 8
    const out = Buffer.allocUnsafe(HEADER + numbers + Buffer.byteLength(table))
    out.writeUInt32LE(this.rows, 0)
    out.writeUInt32LE(out.length - HEADER - numbers, 4)
    out.set(new Uint8Array(this.values.buffer, 0, numbers), HEADER)
    out.write(table, HEADER + numbers)
    this.strings = []
    this.codes = new Map()
    this.rows = 0
    return out
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
export function readPeerRows(bytes: Uint8Array, row: RowInput, fn: (id: string, team: string, unpriced: boolean) => void): void {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  const rows = view.getUint32(0, true)
  const tableLength = view.getUint32(4, true)
  const numbers = rows * PEER_STRIDE * 8
  if (HEADER + numbers + tableLength !== bytes.byteLength) throw new Error(`a batch of ${rows} rows cannot be ${bytes.byteLength} bytes long`)
  // Copied out: the bytes need not start on an 8-byte boundary.
  const v = new Float64Array(rows * PEER_STRIDE)
  new Uint8Array(v.buffer).set(bytes.subarray(HEADER, HEADER + numbers))
  const strings = JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset + HEADER + numbers, tableLength).toString('utf8')) as string[]
  for (let at = 0; at < v.length; at += PEER_STRIDE) {
    let i = at
    row.time = v[i++]
    const cost = v[i++]
    const big = v[i++]
    row.cost = big >= 0 ? BigInt(strings[big]) : cost
    row.flags = v[i++]
    row.duration = v[i++]
    row.ttft = v[i++]
    for (let k = 0; k < TOKENS; k++) row.tokens[k] = v[i++]
    const unpriced = v[i++] === 1
    const id = strings[v[i++]]
    const team = strings[v[i++]]
    for (let k = 0; k < DIMENSIONS.length; k++) row.dims[k] = strings[v[i++]]
    row.traceId = strings[v[i]]
    fn(id, team, unpriced)
  }
}
