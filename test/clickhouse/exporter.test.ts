// The clickhouse exporter delivers every record meterd acknowledged to a real clickhouse-server
// exactly once: through ClickHouse being down for a while, acknowledgements lost on the way
// back (the rows are in, the exporter does not know) and kill -9 of meterd mid-insert.
// (Repricing and refusals: exporter-reprice.test.ts, a file of its own for tap's time per file.)
import { createServer, request as httpRequest } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import { DEFAULT_CONFIG_PATH } from '../../src/core/config/load.js'
import { haveClickHouse, startClickHouse } from '../helpers/clickhouse-server.js'
import { config, contents, metric, post, unmerged, until } from '../helpers/clickhouse-exporter.js'
import { completion } from '../fixtures/wire-examples.js'
import { ADMIN_KEY, call, slowProxy, spawnMeterd, startMeterd, tempDir, writeConfig } from '../helpers/meterd.js'

if (!haveClickHouse) {
  t.fail('clickhouse-server is not installed (.ci/run installs it)')
  process.exit(1)
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
