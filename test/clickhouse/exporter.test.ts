// The clickhouse exporter delivers every record meterd acknowledged to a real clickhouse-server
// exactly once: through ClickHouse being down for a while, acknowledgements lost on the way
// back (the rows are in, the exporter does not know) and kill -9 of meterd mid-insert.
import { spawnSync } from 'node:child_process'
import { createServer, request as httpRequest } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import { DEFAULT_CONFIG_PATH } from '../../src/core/config/load.js'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { createTableSql } from '../../src/adapters/clickhouse/table.js'
import { haveClickHouse, startClickHouse } from '../helpers/clickhouse-server.js'
import { completion, toolEvent } from '../fixtures/wire-examples.js'
import { ADMIN_KEY, call, slowProxy, spawnMeterd, startMeterd, tempDir, until as waitUntil, writeConfig, type Teardown } from '../helpers/meterd.js'

if (!haveClickHouse) {
  t.fail('clickhouse-server is not installed (.ci/run installs it)')
  process.exit(1)
}

const PIPELINE = { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'], exporters: ['lmdb', 'clickhouse'] }

function config(endpoint: string, database: string, extra: Record<string, unknown> = {}) {
  return {
    exporters: { clickhouse: { endpoint, database, batch_size: 40, flush_interval_ms: 20, initial_backoff_ms: 20, max_backoff_ms: 200, ...extra } },
    service: { pipelines: { usage: PIPELINE } },
  }
}

/** until() of the helpers, with ClickHouse's longer start, and its refusals while it starts read as "not yet". */
const until = <T>(what: string, fn: () => Promise<T | undefined>, ms = 30_000): Promise<T> => waitUntil(what, () => fn().catch(() => undefined), ms)

/**
 * The records table, created ahead of the exporter (which then finds it), with background
 * merges stopped: ReplacingMergeTree would otherwise collapse a record inserted twice at its
 * next merge, and hide a duplicate that queries count until then.
 */
async function unmerged(url: string, database: string): Promise<void> {
  const target = { endpoint: url, username: 'default', password: '', database, table: 'usage_records', timeoutMs: 10_000 }
  for (const query of createTableSql(target)) await sql(url, query)
  await sql(url, `SYSTEM STOP MERGES ${database}.usage_records`)
}

async function sql(url: string, query: string): Promise<string> {
  const res = await fetch(`${url}/`, { method: 'POST', body: query })
  const text = await res.text()
  if (!res.ok) throw new Error(text)
  return text.trim()
}

/** Rows in the table, distinct record ids, and each transactionId with how many rows carry it. */
async function contents(url: string, database: string): Promise<{ rows: number; ids: number; tx: Map<string, number> }> {
  const [rows, ids] = (await sql(url, `SELECT count(), uniqExact(id) FROM ${database}.usage_records`)).split('\t').map(Number)
  const tx = new Map<string, number>()
  const text = await sql(url, `SELECT record FROM ${database}.usage_records FORMAT JSONEachRow`)
  for (const line of text.split('\n').filter(Boolean)) {
    const id = JSON.parse(JSON.parse(line).record).body.transactionId as string
    tx.set(id, (tx.get(id) ?? 0) + 1)
  }
  return { rows, ids, tx }
}

async function post(t: Teardown & { equal: Function }, url: string, key: string, batches: number, size: number, acked: string[]): Promise<void> {
  for (let i = 0; i < batches; i++) {
    const tools = i % 3 === 2
    const batch = Array.from({ length: size }, () => (tools ? toolEvent() : completion()))
    const res = await call(`${url}/meter/v2/${tools ? 'tool/events' : 'ai/completions'}`, { key, body: batch })
    t.equal(res.status, 201, 'acknowledged')
    acked.push(...batch.map((b) => b.transactionId as string))
  }
}

const metric = async (url: string, name: string): Promise<number> => {
  const m = new RegExp(`^${name}\\{exporter="clickhouse"\\} (\\S+)$`, 'm').exec((await call(`${url}/metrics`)).text)
  return m ? Number(m[1]) : NaN
}

t.test('ClickHouse stopped for a while, then restarted: the queue drains and every acknowledged record is there once', async (t) => {
  let ch = await startClickHouse()
  t.teardown(async () => {
    await ch.stop()
    ch.remove()
  })
  await unmerged(ch.url, 'outage')
  const m = await startMeterd(t, { config: config(ch.url, 'outage') })
  const key = await m.key()
  const acked: string[] = []
  await post(t, m.url, key, 5, 20, acked)
  await until('the first records in ClickHouse', async () => ((await contents(ch.url, 'outage')).rows === acked.length ? true : undefined))

  await ch.stop()
  await post(t, m.url, key, 8, 25, acked)
  // A client retry of records already stored: the store keeps the first, so ClickHouse must not get a second.
  const again = await call(`${m.url}/meter/v2/ai/completions`, { key, body: [completion({ transactionId: acked[0] }), completion({ transactionId: acked[1] })] })
  t.equal(again.status, 201, 'a retried batch is answered as stored')
  await until('insert errors while ClickHouse is down', async () => ((await metric(m.url, 'meterd_clickhouse_insert_errors_total')) > 0 ? true : undefined))
  const depth = await metric(m.url, 'meterd_clickhouse_queue_records')
  t.ok(depth >= 200, `the queue holds what ClickHouse could not take (${depth} records)`)
  await new Promise((r) => setTimeout(r, 300))
  t.ok((await metric(m.url, 'meterd_clickhouse_queue_oldest_age_seconds')) > 0, 'the age of the oldest queued record is shown')

  ch = await startClickHouse({ dir: ch.dir, httpPort: ch.httpPort, tcpPort: ch.tcpPort })
  await unmerged(ch.url, 'outage')
  await until('the queue to drain', async () => ((await metric(m.url, 'meterd_clickhouse_queue_records')) === 0 ? true : undefined))
  const got = await contents(ch.url, 'outage')
  t.equal(got.rows, acked.length, `${acked.length} rows`)
  t.equal(got.ids, acked.length, 'each record once')
  t.same([...got.tx.keys()].sort(), [...acked].sort(), 'every acknowledged record, and nothing else')
  t.equal(await metric(m.url, 'meterd_clickhouse_inserted_records_total'), acked.length, 'the inserted counter says so too')
})

t.test('a full queue: the request is refused as a whole, so its retry reaches ClickHouse instead of being answered from dedup', async (t) => {
  let ch = await startClickHouse()
  t.teardown(async () => {
    await ch.stop()
    ch.remove()
  })
  await unmerged(ch.url, 'full')
  await ch.stop()
  const m = await startMeterd(t, { config: config(ch.url, 'full', { max_queue_records: 3 }) })
  const key = await m.key()
  const acked: string[] = []
  for (let i = 0; i < 3; i++) {
    const body = completion()
    t.equal((await call(`${m.url}/meter/v2/ai/completions`, { key, body })).status, 201)
    acked.push(body.transactionId as string)
  }
  const refused = completion()
  const full = await call(`${m.url}/meter/v2/ai/completions`, { key, body: refused })
  t.equal(full.status, 503, 'the queue is full')
  const local = await call(`${m.url}/profitstream/v2/api/sources/metrics/ai/completions?transactionId=${refused.transactionId}`, { key })
  t.same(Object.values(local.body._embedded ?? {}).flat(), [], 'the lmdb branch did not store it either')

  ch = await startClickHouse({ dir: ch.dir, httpPort: ch.httpPort, tcpPort: ch.tcpPort })
  await unmerged(ch.url, 'full')
  await until('the queue to drain', async () => ((await metric(m.url, 'meterd_clickhouse_queue_records')) === 0 ? true : undefined))
  t.equal((await call(`${m.url}/meter/v2/ai/completions`, { key, body: refused })).status, 201, 'the retry is stored')
  acked.push(refused.transactionId as string)
  await until('the retried record in ClickHouse', async () => ((await contents(ch.url, 'full')).rows === acked.length ? true : undefined))
  const got = await contents(ch.url, 'full')
  t.same([...got.tx.keys()].sort(), [...acked].sort(), 'every acknowledged record, the retried one too, once')
})

t.test('an insert whose acknowledgement is lost on the way back is not inserted twice', async (t) => {
  const ch = await startClickHouse()
  t.teardown(async () => {
    await ch.stop()
    ch.remove()
  })
  // ClickHouse stores every insert; the proxy drops the answer to the first three.
  let dropped = 0
  const proxy = createServer((req, res) => {
    const insert = decodeURIComponent(req.url ?? '').includes('INSERT')
    const out = httpRequest(new URL(req.url!, ch.url), { method: req.method, headers: req.headers }, (r) => {
      if (insert && r.statusCode === 200 && dropped < 3) {
        dropped++
        r.resume()
        r.on('end', () => res.socket?.destroy())
        return
      }
      res.writeHead(r.statusCode!, r.headers)
      r.pipe(res)
    })
    req.pipe(out)
  })
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', () => r()))
  t.teardown(() => new Promise<void>((r) => (proxy.closeAllConnections(), proxy.close(() => r()))))
  await unmerged(ch.url, 'lost')
  const m = await startMeterd(t, { config: config(`http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, 'lost') })
  const key = await m.key()
  const acked: string[] = []
  await post(t, m.url, key, 6, 20, acked)
  await until('the queue to drain', async () => ((await metric(m.url, 'meterd_clickhouse_queue_records')) === 0 && dropped === 3 ? true : undefined))
  t.equal(dropped, 3, 'three acknowledgements were lost')
  t.ok((await metric(m.url, 'meterd_clickhouse_insert_errors_total')) >= 3, 'each counted as an insert error')
  const got = await contents(ch.url, 'lost')
  t.equal(got.rows, acked.length, `${acked.length} rows, although batches were delivered without an answer`)
  t.equal(got.ids, acked.length, 'each record once')
  t.same([...got.tx.keys()].sort(), [...acked].sort(), 'every acknowledged record')
})

t.test('kill -9 of meterd while its insert is at ClickHouse: after restart every acknowledged record is there once', async (t) => {
  const ch = await startClickHouse()
  t.teardown(async () => {
    await ch.stop()
    ch.remove()
  })
  // A slow link: inserts reach ClickHouse (which stores them) but the answers come late.
  let forwarded = 0
  const proxyUrl = await slowProxy(t, ch.url, (url) => {
    if (decodeURIComponent(url).includes('INSERT')) forwarded++
  })
  await unmerged(ch.url, 'killed')
  const dir = tempDir()
  const dataDir = join(dir, 'data')
  const cfg = writeConfig(dir, config(proxyUrl, 'killed', { batch_size: 20 }))
  const first = await spawnMeterd(t, { dataDir, configFiles: [DEFAULT_CONFIG_PATH, cfg] })
  const acked: string[] = []
  await post(t, first.url, ADMIN_KEY, 6, 20, acked)
  await until('an insert to reach ClickHouse', async () => (forwarded > 0 ? true : undefined))
  await first.stop('SIGKILL')
  const before = (await contents(ch.url, 'killed')).rows
  t.ok(before < acked.length, `meterd died with records still queued (${before} of ${acked.length} in ClickHouse)`)
  const second = await spawnMeterd(t, { dataDir, configFiles: [DEFAULT_CONFIG_PATH, cfg] })
  await until('every acknowledged record in ClickHouse', async () => ((await metric(second.url, 'meterd_clickhouse_queue_records')) === 0 ? true : undefined))
  const got = await contents(ch.url, 'killed')
  t.equal(got.rows, acked.length, `${acked.length} rows`)
  t.equal(got.ids, acked.length, 'each record once, although an insert was sent twice')
  t.same([...got.tx.keys()].sort(), [...acked].sort(), 'every acknowledged record')
  await second.stop()
})

t.test('with two workers (one queue in one LMDB environment) every acknowledged record is inserted once', async (t) => {
  const ch = await startClickHouse()
  t.teardown(async () => {
    await ch.stop()
    ch.remove()
  })
  await unmerged(ch.url, 'workers')
  // Slow answers: a second sender on the same queue would read rows the first is still inserting.
  const proxyUrl = await slowProxy(t, ch.url, undefined, 200)
  const dir = tempDir()
  const cfg = writeConfig(dir, config(proxyUrl, 'workers', { batch_size: 20 }))
  const m = await spawnMeterd(t, { dataDir: join(dir, 'data'), configFiles: [DEFAULT_CONFIG_PATH, cfg], env: { METERD_WORKERS: '2' } })
  const acked: string[] = []
  // Several connections at once, so both workers store records.
  await Promise.all(Array.from({ length: 4 }, () => post(t, m.url, ADMIN_KEY, 5, 20, acked)))
  await until('the queue to drain', async () => ((await metric(m.url, 'meterd_clickhouse_queue_records')) === 0 && (await contents(ch.url, 'workers')).rows >= acked.length ? true : undefined))
  const got = await contents(ch.url, 'workers')
  t.equal(got.rows, acked.length, `${acked.length} rows`)
  t.equal(got.ids, acked.length, 'each record once')
  t.same([...got.tx.keys()].sort(), [...acked].sort(), 'every acknowledged record')
  await m.stop()
})

/** The `meterd reprice` command, in another process, on a data directory with this price book. */
function reprice(dataDir: string, models: Record<string, unknown>[]): { priced: number } {
  const cfg = writeConfig(join(dataDir, '..'), { storage: { path: dataDir }, processors: { pricing: { models } } }, 'reprice.yaml')
  const run = spawnSync(process.execPath, [join(PACKAGE_ROOT, 'bin/meterd.js'), 'reprice', '--config', cfg, '--json'], { encoding: 'utf8', timeout: 60_000 })
  if (run.status !== 0) throw new Error(`meterd reprice: ${run.stderr}`)
  return JSON.parse(run.stdout)
}

t.test('a table of the previous build, and records repriced after they were queued or inserted: each reaches ClickHouse once, at its new cost, through ClickHouse down and kill -9', async (t) => {
  let ch = await startClickHouse()
  t.teardown(async () => {
    await ch.stop()
    ch.remove()
  })
  // The table as the previous build created it: no version column, ReplacingMergeTree().
  const target = { endpoint: ch.url, username: 'default', password: '', database: 'legacy', table: 'usage_records', timeoutMs: 10_000 }
  const [db, ddl] = createTableSql(target)
  const old = ddl.replace(', `version` UInt64', '').replace('ReplacingMergeTree(version)', 'ReplacingMergeTree()')
  t.not(old, ddl, 'the old definition differs')
  await sql(ch.url, db)
  await sql(ch.url, old)
  await sql(ch.url, 'SYSTEM STOP MERGES legacy.usage_records')

  const dir = tempDir()
  const dataDir = join(dir, 'data')
  const cfg = writeConfig(dir, config(ch.url, 'legacy'))
  let m = await spawnMeterd(t, { dataDir, configFiles: [DEFAULT_CONFIG_PATH, cfg] })
  // acme-1 is not in the price book: these are stored unpriced, at 0.
  const unknown = (tx: string) => completion({ transactionId: tx, provider: 'Acme', model: 'acme-1', inputTokenCount: 1000, outputTokenCount: 500, totalTokenCount: 1500, totalCost: undefined })
  const acked: string[] = []
  await post(t, m.url, ADMIN_KEY, 3, 20, acked)
  const early = ['acme-early-1', 'acme-early-2', 'acme-early-3']
  t.equal((await call(`${m.url}/meter/v2/ai/completions`, { key: ADMIN_KEY, body: early.map(unknown) })).status, 201, 'unpriced records are stored')
  acked.push(...early)
  await until('the first records in ClickHouse', async () => ((await contents(ch.url, 'legacy')).rows === acked.length ? true : undefined))
  t.equal(await sql(ch.url, "SELECT type FROM system.columns WHERE database = 'legacy' AND table = 'usage_records' AND name = 'version'"), 'UInt64', 'the old table got the version column')

  // ClickHouse down: two more unpriced records stay queued, then everything unpriced is priced.
  await ch.stop()
  const late = ['acme-late-1', 'acme-late-2']
  t.equal((await call(`${m.url}/meter/v2/ai/completions`, { key: ADMIN_KEY, body: late.map(unknown) })).status, 201, 'more are stored while ClickHouse is down')
  acked.push(...late)
  await post(t, m.url, ADMIN_KEY, 1, 10, acked)
  const priced = reprice(dataDir, [{ provider: 'acme', model: 'acme-1', effective: '2026-01-01', input: 2, output: 10 }])
  t.equal(priced.priced, 5, 'meterd reprice priced the five acme-1 records')
  // A new row is queued for each of the five; the two still queued had their first row replaced
  // (it leaves the queue unsent): 2 + 10 records and 5 new rows wait.
  await until('the new rows in the queue', async () => ((await metric(m.url, 'meterd_clickhouse_queue_records')) === 17 - 2 ? true : undefined), 10_000)
  t.pass('the new rows wait in the queue with the rest')
  await m.stop('SIGKILL')

  ch = await startClickHouse({ dir: ch.dir, httpPort: ch.httpPort, tcpPort: ch.tcpPort })
  await sql(ch.url, 'SYSTEM STOP MERGES legacy.usage_records')
  m = await spawnMeterd(t, { dataDir, configFiles: [DEFAULT_CONFIG_PATH, cfg] })
  await until('the queue to drain', async () => ((await metric(m.url, 'meterd_clickhouse_queue_records')) === 0 ? true : undefined))

  const tx = "visitParamExtractString(record, 'transactionId')"
  const rows = await sql(ch.url, `SELECT ${tx} AS tx, version > 0 AS repriced, toString(cost) FROM legacy.usage_records WHERE ${tx} LIKE 'acme-%' ORDER BY tx, version FORMAT TabSeparated`)
  // 1000 × $2/M + 500 × $10/M = 0.007.
  t.same(rows.split('\n'), [
    'acme-early-1\t0\t0.000000000000',
    'acme-early-1\t1\t0.007000000000',
    'acme-early-2\t0\t0.000000000000',
    'acme-early-2\t1\t0.007000000000',
    'acme-early-3\t0\t0.000000000000',
    'acme-early-3\t1\t0.007000000000',
    'acme-late-1\t1\t0.007000000000',
    'acme-late-2\t1\t0.007000000000',
  ], 'an inserted record gets its new row once; a record repriced while queued is inserted at its new cost only')
  const final = await sql(ch.url, `SELECT count(), uniqExact(id), toString(sum(cost)) FROM legacy.usage_records FINAL WHERE ${tx} LIKE 'acme-%'`)
  t.equal(final, '5\t5\t0.035000000000', 'read FINAL, each record counts once, at its new cost')
  const got = await contents(ch.url, 'legacy')
  t.equal(got.ids, acked.length, 'every acknowledged record is there')
  t.equal(got.rows, acked.length + 3, 'and nothing else: one row per record, and one more per record repriced after its insert')
  await m.stop()
})

t.test('a record ClickHouse refuses for good goes to the dead letters; the records around and after it arrive', async (t) => {
  const ch = await startClickHouse()
  t.teardown(async () => {
    await ch.stop()
    ch.remove()
  })
  await unmerged(ch.url, 'refused')
  // A long flush interval: the records posted below are inserted together, the refused one among them.
  // A cost ClickHouse's Decimal128(12) cannot hold (26 digits before the point: "Decimal value is
  // too big"): a client's is at most $10^9 (a 400 past it), so an operator's attributes processor
  // raises the one record that carries a totalCost to $10^30 after validation.
  const base = config(ch.url, 'refused', { batch_size: 100, flush_interval_ms: 500 })
  const raised = {
    ...base,
    processors: { attributes: { actions: [{ key: 'totalCost', action: 'update', value: 1e30 }] } },
    service: { pipelines: { usage: { ...PIPELINE, processors: ['validate', 'attribution', 'attributes', 'pricing'] } } },
  }
  const m = await startMeterd(t, { config: raised })
  const key = await m.key()
  const acked: string[] = []
  await post(t, m.url, key, 2, 20, acked)
  const huge = completion({ totalCost: 1 })
  const around = [completion(), completion(), huge, completion(), completion()]
  const res = await call(`${m.url}/meter/v2/ai/completions`, { key, body: around })
  t.equal(res.status, 201, 'meterd stores the record')
  acked.push(...around.filter((b) => b !== huge).map((b) => b.transactionId as string))
  await post(t, m.url, key, 2, 20, acked)

  await until('the queue to drain', async () => ((await metric(m.url, 'meterd_clickhouse_queue_records')) === 0 ? true : undefined))
  const got = await contents(ch.url, 'refused')
  t.equal(got.rows, acked.length, `the ${acked.length} other records are in ClickHouse`)
  t.same([...got.tx.keys()].sort(), [...acked].sort(), 'every acknowledged record but the refused one, once')
  t.equal(await metric(m.url, 'meterd_clickhouse_dead_letter_records'), 1, 'one record in the dead letters')

  const dead = [...m.service.store.db('clickhouse-dead:clickhouse').getRange({})]
  t.equal(dead.length, 1, 'the dead-letter database in the data directory holds it')
  const letter = dead[0].value as { line: string; status: number; error: string }
  // The line's last column is the record's JSON (TabSeparated: its backslashes doubled).
  const record = JSON.parse(letter.line.trimEnd().split('\t').at(-1)!.replace(/\\\\/g, '\\'))
  t.equal(record.body.transactionId, huge.transactionId, 'the refused record')
  t.equal(dead[0].key, record.id, 'under its record id')
  t.equal(letter.status, 69, "with ClickHouse's error code")
  t.match(letter.error, /Decimal value is too big/, 'and its error')
  t.ok(
    m.logs.some((l) => l.includes('ClickHouse refused a record for good') && l.includes('Decimal value is too big')),
    'the refusal is logged',
  )

  // Not a refusal: a table dropped under the exporter is created again, and nothing is dead-lettered.
  await sql(ch.url, 'DROP TABLE refused.usage_records')
  const after: string[] = []
  await post(t, m.url, key, 1, 10, after)
  await until('the records after the drop', async () => ((await contents(ch.url, 'refused')).rows === after.length ? true : undefined))
  t.same([...(await contents(ch.url, 'refused')).tx.keys()].sort(), after.sort(), 'the table was created again and holds the new records')
  t.equal(await metric(m.url, 'meterd_clickhouse_dead_letter_records'), 1, 'still one dead letter')
})
