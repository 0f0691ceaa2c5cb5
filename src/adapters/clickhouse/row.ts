import { ERROR } from '../../domain/analytics/block.js'
import { DIMENSIONS } from '../../domain/analytics/dimensions.js'
import { readRow, RowInput } from '../../domain/analytics/row.js'
import { formatUnits } from '../../domain/analytics/units.js'
import type { UsageRecord } from '../../model/usage-record.js'

// A record's row in the records table (table.ts), kept apart from the client so that `meterd
// reprice` can queue rows without loading it.

// The table's columns in insert order. Money is Decimal128(12) (exact to 10^-12 USD, the store's
// own scale); unknown durations are nan; the dimensions keep their analytics names. `version`
// is last: 0 for the row a record is stored with, and the time (ms) of each later change of the
// stored record (`meterd reprice`); queries read the highest (table.ts, analytics.ts).
export const COLUMNS = [
  ['event_date', 'Date'],
  ['time_ms', 'Int64'],
  ['team', 'String'],
  ['id', 'String'],
  ['kind', 'String'],
  ['counted', 'UInt8'],
  ['is_tool', 'UInt8'],
  ['error', 'UInt8'],
  ['cost', 'Decimal128(12)'],
  ['duration_ms', 'Float64'],
  ['ttft_ms', 'Float64'],
  ['input_tokens', 'Float64'],
  ['output_tokens', 'Float64'],
  ['reasoning_tokens', 'Float64'],
  ['cache_read_tokens', 'Float64'],
  ['cache_creation_tokens', 'Float64'],
  ['total_tokens', 'Float64'],
  ...DIMENSIONS.map((d) => [d, 'String']),
  ['trace_id', 'String'],
  ['record', 'String'],
  ['version', 'UInt64'],
] as const
export const COLUMN_NAMES = COLUMNS.map(([name]) => name)

const row = new RowInput()

/**
 * One record as a TabSeparated line in COLUMNS order up to `record` (the version is added when
 * the line is inserted: withVersion): what analytics reads of it (the same readRow the embedded
 * index uses, so both backends count the same thing) and the record itself. Queued lines of
 * earlier builds have the same form.
 */
export function encodeRow(r: UsageRecord): { line: string; date: string } {
  const counted = readRow(r, row)
  const time = counted ? row.time : Date.parse(r.eventTime)
  const date = new Date(time).toISOString().slice(0, 10)
  const t = row.tokens
  const fields: string[] = [
    date,
    String(time),
    tsv(r.caller.team),
    tsv(r.id),
    r.kind,
    counted ? '1' : '0',
    r.kind === 'tool' ? '1' : '0',
  ]
  if (counted) {
    fields.push(row.flags & ERROR ? '1' : '0', formatUnits(row.cost), num(row.duration), num(row.ttft), num(t[0]), num(t[1]), num(t[2]), num(t[3]), num(t[4]), num(t[5]))
    for (let d = 0; d < DIMENSIONS.length; d++) fields.push(tsv(row.dims[d]))
  } else {
    // Not counted (a disabled tool's event): kept for the trace detail, which reads records.
    fields.push('0', '0', 'nan', 'nan', '0', '0', '0', '0', '0', '0')
    for (let d = 0; d < DIMENSIONS.length; d++) fields.push('')
  }
  fields.push(tsv(r.attribution.traceId), tsv(JSON.stringify(r)))
  return { line: fields.join('\t') + '\n', date }
}

/** A line of encodeRow with its version column. */
export function withVersion(line: string, version: number): string {
  return line.slice(0, -1) + '\t' + version + '\n'
}

const num = (v: number): string => (Number.isNaN(v) ? 'nan' : String(v))

/** TabSeparated escaping. */
function tsv(s: string): string {
  return /[\\\t\n\r\0]/.test(s) ? s.replace(/[\\\t\n\r\0]/g, (c) => ESC[c]) : s
}
const ESC: Record<string, string> = { '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r', '\0': '\\0' }
