// The clickhouse exporter and records repriced after they were queued or inserted, on a table of
// the previous build, and records ClickHouse refuses for good (dead letters). Split from
// exporter.test.ts: with ClickHouse started eight times, one file outlasted tap's 120 s on a
// loaded machine.
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import t from 'tap'
import { DEFAULT_CONFIG_PATH } from '../../src/core/config/load.js'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { createTableSql } from '../../src/adapters/clickhouse/table.js'
import { haveClickHouse, startClickHouse } from '../helpers/clickhouse-server.js'
import { PIPELINE, config, contents, metric, post, sql, unmerged, until } from '../helpers/clickhouse-exporter.js'
import { completion } from '../fixtures/wire-examples.js'
import { ADMIN_KEY, call, spawnMeterd, startMeterd, tempDir, writeConfig } from '../helpers/meterd.js'

if (!haveClickHouse) {
  t.fail('clickhouse-server is not installed (.ci/run installs it)')
  process.exit(1)
}
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
