import { createClient, type ClickHouseClient } from '@clickhouse/client'
import { Readable } from 'node:stream'
import { ERROR } from '../../domain/analytics/block.js'
import { DIMENSIONS } from '../../domain/analytics/dimensions.js'
import { readRow, RowInput } from '../../domain/analytics/row.js'
import { formatUnits } from '../../domain/analytics/units.js'
import type { UsageRecord } from '../../model/usage-record.js'

/** Where the records go: the server, and the database and table they live in. */
export interface ClickHouseTarget {
  endpoint: string
  username: string
  password: string
  database: string
  table: string
  timeoutMs: number
}

// The table's columns in insert order. Money is Decimal128(12) (exact to 10^-12 USD, the store's
// own scale); unknown durations are nan; the dimensions keep their analytics names.
const COLUMNS = [
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
] as const
export const COLUMN_NAMES = COLUMNS.map(([name]) => name)

/**
 * The records table (works on ClickHouse 18.16 and later: no DateTime64, no query parameters,
 * no Decimal arrays). ReplacingMergeTree on (team, time_ms, id): a record inserted twice
 * collapses to one row when parts merge; the exporter also never inserts a record it cannot
 * prove absent after a failed or interrupted insert (src/exporters/clickhouse), so queries
 * need no FINAL.
 */
export function createTableSql(t: ClickHouseTarget): string[] {
  return [
    `CREATE DATABASE IF NOT EXISTS ${ident(t.database)}`,
    `CREATE TABLE IF NOT EXISTS ${tableOf(t)} (${COLUMNS.map(([n, type]) => `${ident(n)} ${type}`).join(', ')}) ` +
      'ENGINE = ReplacingMergeTree() PARTITION BY toYYYYMM(event_date) ORDER BY (team, time_ms, id)',
  ]
}

export function tableOf(t: ClickHouseTarget): string {
  return `${ident(t.database)}.${ident(t.table)}`
}

export function clientOf(t: ClickHouseTarget): ClickHouseClient {
  return createClient({ url: t.endpoint, username: t.username, password: t.password, request_timeout: t.timeoutMs, max_open_connections: 4 })
}

/** An identifier as ClickHouse reads it (the config's database and table names). */
export function ident(name: string): string {
  return '`' + name.replace(/\\/g, '\\\\').replace(/`/g, '\\`') + '`'
}

/** A string literal (18.16 has no query parameters, so values are quoted here, always). */
export function quote(s: string): string {
  return "'" + s.replace(/\\/g, '\\\\').replace(/'/g, "\\'") + "'"
}

/** A Decimal128(12) literal of an amount in units (10^-12 USD). */
export function money(units: bigint): string {
  return `toDecimal128(${quote(formatUnits(units))}, 12)`
}

/** A Decimal128(12) as ClickHouse prints it (always 12 places) in units. */
export function unitsOf(text: string): bigint {
  return BigInt(text.replace('.', ''))
}

const row = new RowInput()

/**
 * One record as a TabSeparated line in COLUMNS order: what analytics reads of it (the same
 * readRow the embedded index uses, so both backends count the same thing) and the record itself.
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

const num = (v: number): string => (Number.isNaN(v) ? 'nan' : String(v))

/** TabSeparated escaping. */
function tsv(s: string): string {
  return /[\\\t\n\r\0]/.test(s) ? s.replace(/[\\\t\n\r\0]/g, (c) => ESC[c]) : s
}
const ESC: Record<string, string> = { '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r', '\0': '\\0' }

/** Inserts TabSeparated lines (COLUMNS order) in one request. */
export async function insertLines(client: ClickHouseClient, t: ClickHouseTarget, lines: string[], signal?: AbortSignal): Promise<void> {
  await client.insert({
    table: tableOf(t),
    columns: COLUMN_NAMES as unknown as [string, ...string[]],
    values: Readable.from([Buffer.from(lines.join(''))], { objectMode: false }),
    format: 'TabSeparated',
    abort_signal: signal,
  })
}
