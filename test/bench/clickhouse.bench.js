/**
 * ClickHouse exporter benchmark (issue 19 §3): records per second the clickhouse exporter
 * inserts, against a bare @clickhouse/client insert of the same rows, in the same run.
 *
 *   exporter – a meterd ([lmdb, clickhouse]) whose ClickHouse is stopped while N records are
 *              posted (they wait in its LMDB queue), then started: the drain, from ClickHouse
 *              answering to the last record acknowledged, read from meterd_clickhouse_inserted_records_total.
 *              It includes what the exporter adds: reading the queue, the INSERT, and the
 *              durable LMDB commit that removes each batch.
 *   bare     – the same rows (read back from the exporter's table as TabSeparated) inserted
 *              into a second table of the same definition with @clickhouse/client, in
 *              batches of the same size, one after the other.
 *
 * Target: exporter / bare ≥ 0.5. BENCH_RECORDS (default 50000) sets N; BENCH_BATCH (default
 * 5000) the batch size. Run: `npm run bench -- clickhouse`.
 */
import { createClient } from '@clickhouse/client'
import { Readable } from 'node:stream'
import { haveClickHouse, startClickHouse } from '../helpers/clickhouse-server.js'
import { bodyTemplate, fmt, header, line, ratioLine, spawnMeterd } from './lib.js'

const N = Math.max(1000, Number(process.env.BENCH_RECORDS) || 50_000)
const BATCH = Math.max(100, Number(process.env.BENCH_BATCH) || 5000)
const POST = 500
const DB = 'bench'

header(`clickhouse: ${N} records, batches of ${BATCH}`)
if (!haveClickHouse) {
  line('skipped', 'clickhouse-server is not installed')
  process.exit(0)
}

let ch = await startClickHouse()
const sql = async (query) => {
  const res = await fetch(`${ch.url}/`, { method: 'POST', body: query })
  const text = await res.text()
  if (!res.ok) throw new Error(text)
  return text.trim()
}
const d = await spawnMeterd({
  config: {
    exporters: { clickhouse: { endpoint: ch.url, database: DB, batch_size: BATCH, flush_interval_ms: 50, initial_backoff_ms: 10, max_backoff_ms: 20, max_queue_records: N * 2 } },
    service: { pipelines: { usage: { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'], exporters: ['lmdb', 'clickhouse'] } } },
  },
})
const inserted = async () => {
  const m = /^meterd_clickhouse_inserted_records_total\{exporter="clickhouse"\} (\S+)$/m.exec(await (await fetch(`${d.url}/metrics`)).text())
  return m ? Number(m[1]) : 0
}
const until = async (what, fn, ms = 300_000) => {
  const end = Date.now() + ms
  while (!(await fn().catch(() => false))) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 5))
  }
}

try {
  // The table exists before the outage (the exporter creates it at start).
  await until('the records table', async () => (await sql(`EXISTS TABLE ${DB}.usage_records`)) === '1')
  const { dir, httpPort, tcpPort } = ch
  await ch.stop()

  const [before, after] = bodyTemplate()
  let seq = 0
  const posted = Date.now()
  for (let i = 0; i < N; i += POST) {
    const bodies = Array.from({ length: Math.min(POST, N - i) }, () => `${before}ch-bench-${process.pid}-${seq++}${after}`)
    const res = await fetch(`${d.url}/meter/v2/ai/completions`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': d.key }, body: `[${bodies.join(',')}]` })
    if (res.status !== 201) throw new Error(`post: ${res.status} ${await res.text()}`)
  }
  line('queued', `${N} records in ${fmt((Date.now() - posted) / 1000, 1)} s (ClickHouse down)`)

  ch = await startClickHouse({ dir, httpPort, tcpPort })
  const started = performance.now()
  await until('the queue to drain', async () => (await inserted()) >= N)
  const exporterSeconds = (performance.now() - started) / 1000
  const exporterRate = N / exporterSeconds
  line('exporter', `${fmt(exporterRate)} records/s (${fmt(exporterSeconds, 2)} s, ClickHouse start-up to last acknowledgement)`)
  const [rows, ids] = (await sql(`SELECT count(), uniqExact(id) FROM ${DB}.usage_records`)).split('\t').map(Number)
  line('rows in ClickHouse', `${rows} (${ids} distinct records)`)

  // The same rows, by a bare client.
  const ddl = (await sql(`SHOW CREATE TABLE ${DB}.usage_records FORMAT TabSeparatedRaw`)).replace(`${DB}.usage_records`, `${DB}.bare`)
  await sql(ddl)
  const tsv = (await (await fetch(`${ch.url}/`, { method: 'POST', body: `SELECT * FROM ${DB}.usage_records FORMAT TabSeparated` })).text()).split('\n').filter(Boolean)
  const client = createClient({ url: ch.url })
  const t0 = performance.now()
  for (let i = 0; i < tsv.length; i += BATCH) {
    const body = tsv.slice(i, i + BATCH).join('\n') + '\n'
    await client.insert({ table: `${DB}.bare`, values: Readable.from([Buffer.from(body)], { objectMode: false }), format: 'TabSeparated' })
  }
  const bareSeconds = (performance.now() - t0) / 1000
  await client.close()
  const bareRate = tsv.length / bareSeconds
  line('bare @clickhouse/client', `${fmt(bareRate)} records/s (${fmt(bareSeconds, 2)} s)`)
  process.stdout.write(ratioLine('exporter / bare', exporterRate, bareRate, 0.5) + '\n')
} finally {
  await d.stop()
  await ch.stop()
  ch.remove()
}
