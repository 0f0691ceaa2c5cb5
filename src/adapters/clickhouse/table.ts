import type { ClickHouseClient } from '@clickhouse/client'
import { Readable } from 'node:stream'
import { formatUnits } from '../../domain/analytics/units.js'
import { COLUMN_NAMES, COLUMNS } from './row.js'

export { COLUMN_NAMES, encodeRow, withVersion } from './row.js'

/** Where the records go: the server, and the database and table they live in. */
export interface ClickHouseTarget {
  endpoint: string
  username: string
  password: string
  database: string
  table: string
  timeoutMs: number
}

/**
 * The records table (works on ClickHouse 18.16 and later: no DateTime64, no query parameters,
 * no Decimal arrays). ReplacingMergeTree on (team, time_ms, id) with `version`: a record's rows
 * (the one it was stored with, and one per later change of its cost) collapse to the highest
 * version when parts merge, and queries read `FINAL` (analytics.ts), so they see that one
 * before. The exporter never inserts a row it cannot prove absent after a failed or
 * interrupted insert (src/exporters/clickhouse).
 */
export function createTableSql(t: ClickHouseTarget): string[] {
  return [
    `CREATE DATABASE IF NOT EXISTS ${ident(t.database)}`,
    `CREATE TABLE IF NOT EXISTS ${tableOf(t)} (${COLUMNS.map(([n, type]) => `${ident(n)} ${type}`).join(', ')}) ` +
      'ENGINE = ReplacingMergeTree(version) PARTITION BY toYYYYMM(event_date) ORDER BY (team, time_ms, id)',
  ]
}

/**
 * Creates the table when missing, and brings a table of an earlier build (no `version` column,
 * `ReplacingMergeTree()`) up to date: the column is added (DEFAULT 0, what its rows are). Such
 * a table keeps its engine, which keeps the last row inserted of a record when parts merge
 * and under FINAL; the exporter inserts a record's rows in version order, never two in one
 * insert, so that is the highest version there too.
 */
export async function ensureTable(client: ClickHouseClient, t: ClickHouseTarget, signal?: AbortSignal): Promise<'created' | 'migrated' | 'ready'> {
  for (const query of createTableSql(t)) await client.command({ query, abort_signal: signal })
  const has = async () => {
    const res = await client.query({
      query: `SELECT count() AS n FROM system.columns WHERE database = ${quote(t.database)} AND table = ${quote(t.table)} AND name = 'version'`,
      format: 'JSONEachRow',
      abort_signal: signal,
    })
    return Number(((await res.json()) as { n: string }[])[0]?.n) > 0
  }
  if (await has()) return 'ready'
  try {
    // 18.16 has no ADD COLUMN IF NOT EXISTS: another replica may add it first.
    await client.command({ query: `ALTER TABLE ${tableOf(t)} ADD COLUMN version UInt64 DEFAULT 0`, abort_signal: signal })
  } catch (err) {
    if (!(await has())) throw err
  }
  return 'migrated'
}

/**
 * ClickHouse's error codes that say the data itself can never be stored, whatever is retried:
 * a value that does not parse as, or does not fit, its column's type, or that is too large.
 * Everything else (ClickHouse down or restarting, timeouts, too many parts, memory, a missing
 * table or column, authentication) is worth retrying.
 */
const REFUSED = new Map<number, string>([
  [6, 'CANNOT_PARSE_TEXT'],
  [25, 'CANNOT_PARSE_ESCAPE_SEQUENCE'],
  [26, 'CANNOT_PARSE_QUOTED_STRING'],
  [27, 'CANNOT_PARSE_INPUT_ASSERTION_FAILED'],
  [38, 'CANNOT_PARSE_DATE'],
  [41, 'CANNOT_PARSE_DATETIME'],
  [69, 'ARGUMENT_OUT_OF_BOUND'], // 18.16: "Decimal value is too big"
  [70, 'CANNOT_CONVERT_TYPE'],
  [72, 'CANNOT_PARSE_NUMBER'],
  [117, 'INCORRECT_DATA'],
  [128, 'TOO_LARGE_ARRAY_SIZE'],
  [130, 'CANNOT_READ_ARRAY_FROM_TEXT'],
  [131, 'TOO_LARGE_STRING_SIZE'],
  [321, 'VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE'],
  [407, 'DECIMAL_OVERFLOW'],
])

/** ClickHouse's error code of a failed request (undefined: no answer from ClickHouse). */
export function errorCode(err: unknown): number | undefined {
  const e = err as { code?: unknown; message?: unknown }
  // Recent servers: ClickHouseError.code; 18.16's answers reach the client as "Code: 69, e.displayText() = …".
  if (typeof e?.code === 'string' && /^\d+$/.test(e.code)) return Number(e.code)
  const m = typeof e?.message === 'string' ? /^Code: (\d+)[,.]/.exec(e.message) : null
  return m ? Number(m[1]) : undefined
}

/** The error's code and name when ClickHouse refuses the data for good (REFUSED), else undefined. */
export function refusal(err: unknown): { code: number; name: string } | undefined {
  const code = errorCode(err)
  const name = code === undefined ? undefined : REFUSED.get(code)
  return name === undefined ? undefined : { code: code!, name }
}

/** UNKNOWN_TABLE, UNKNOWN_DATABASE: dropped under the exporter, which creates it again. */
export const isMissingTable = (err: unknown): boolean => [60, 81].includes(errorCode(err) ?? -1)

export function tableOf(t: ClickHouseTarget): string {
  return `${ident(t.database)}.${ident(t.table)}`
}

/** A client of the target. The package is loaded here, not when the module is: a daemon without a clickhouse exporter never loads it (about 90 ms of CPU at each start). */
export async function clientOf(t: ClickHouseTarget): Promise<ClickHouseClient> {
  const { ClickHouseLogLevel, createClient } = await import('@clickhouse/client')
  // The client's own log (to the console) is off: the exporter and the analytics reader log failures through meterd's logger.
  return createClient({ url: t.endpoint, username: t.username, password: t.password, request_timeout: t.timeoutMs, max_open_connections: 4, log: { level: ClickHouseLogLevel.OFF } })
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

/** Inserts TabSeparated lines of every column (COLUMNS order: encodeRow's lines withVersion) in one request. */
export async function insertLines(client: ClickHouseClient, t: ClickHouseTarget, lines: string[], signal?: AbortSignal): Promise<void> {
  await client.insert({
    table: tableOf(t),
    columns: COLUMN_NAMES as unknown as [string, ...string[]],
    values: Readable.from([Buffer.from(lines.join(''))], { objectMode: false }),
    format: 'TabSeparated',
    abort_signal: signal,
  })
}
