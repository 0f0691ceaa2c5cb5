/**
 * What the tests of the clickhouse exporter against a real clickhouse-server share
 * (test/clickhouse/exporter.test.ts, exporter-reprice.test.ts): the exporter's config, the
 * table, and reading it back.
 */
import { createTableSql } from '../../src/adapters/clickhouse/table.js'
import { completion, toolEvent } from '../fixtures/wire-examples.js'
import { call, until as waitUntil, type Teardown } from './meterd.js'

export const PIPELINE = { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'], exporters: ['lmdb', 'clickhouse'] }

export function config(endpoint: string, database: string, extra: Record<string, unknown> = {}) {
  return {
    exporters: { clickhouse: { endpoint, database, batch_size: 40, flush_interval_ms: 20, initial_backoff_ms: 20, max_backoff_ms: 200, ...extra } },
    service: { pipelines: { usage: PIPELINE } },
  }
}

/** until() of the helpers, with ClickHouse's longer start, and its refusals while it starts read as "not yet". */
export const until = <T>(what: string, fn: () => Promise<T | undefined>, ms = 30_000): Promise<T> => waitUntil(what, () => fn().catch(() => undefined), ms)

/**
 * The records table, created ahead of the exporter (which then finds it), with background
 * merges stopped: ReplacingMergeTree would otherwise collapse a record inserted twice at its
 * next merge, and hide a duplicate that queries count until then.
 */
export async function unmerged(url: string, database: string): Promise<void> {
  const target = { endpoint: url, username: 'default', password: '', database, table: 'usage_records', timeoutMs: 10_000 }
  for (const query of createTableSql(target)) await sql(url, query)
  await sql(url, `SYSTEM STOP MERGES ${database}.usage_records`)
}

export async function sql(url: string, query: string): Promise<string> {
  const res = await fetch(`${url}/`, { method: 'POST', body: query })
  const text = await res.text()
  if (!res.ok) throw new Error(text)
  return text.trim()
}

/** Rows in the table, distinct record ids, and each transactionId with how many rows carry it. */
export async function contents(url: string, database: string): Promise<{ rows: number; ids: number; tx: Map<string, number> }> {
  const [rows, ids] = (await sql(url, `SELECT count(), uniqExact(id) FROM ${database}.usage_records`)).split('\t').map(Number)
  const tx = new Map<string, number>()
  const text = await sql(url, `SELECT record FROM ${database}.usage_records FORMAT JSONEachRow`)
  for (const line of text.split('\n').filter(Boolean)) {
    const id = JSON.parse(JSON.parse(line).record).body.transactionId as string
    tx.set(id, (tx.get(id) ?? 0) + 1)
  }
  return { rows, ids, tx }
}

export async function post(t: Teardown & { equal: Function }, url: string, key: string, batches: number, size: number, acked: string[]): Promise<void> {
  for (let i = 0; i < batches; i++) {
    const tools = i % 3 === 2
    const batch = Array.from({ length: size }, () => (tools ? toolEvent() : completion()))
    const res = await call(`${url}/meter/v2/${tools ? 'tool/events' : 'ai/completions'}`, { key, body: batch })
    t.equal(res.status, 201, 'acknowledged')
    acked.push(...batch.map((b) => b.transactionId as string))
  }
}

export const metric = async (url: string, name: string): Promise<number> => {
  const m = new RegExp(`^${name}\\{exporter="clickhouse"\\} (\\S+)$`, 'm').exec((await call(`${url}/metrics`)).text)
  return m ? Number(m[1]) : NaN
}

