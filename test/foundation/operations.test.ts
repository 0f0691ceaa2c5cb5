import t from 'tap'
import { existsSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { ADMIN_KEY, call, removeDir, startMeterd, tempDir } from '../helpers/meterd.js'
import { completion } from '../fixtures/wire-examples.js'

t.test('health, readiness per pipeline, Prometheus metrics per component, debug exporter', async (t) => {
  const m = await startMeterd(t, {
    config: {
      exporters: { lmdb: {}, debug: { verbosity: 'detailed' } },
      service: {
        extensions: ['apikeys'],
        pipelines: { usage: { receivers: ['metering', 'genai'], processors: ['validate', 'attribution'], exporters: ['lmdb', 'debug'] } },
      },
    },
  })
  const key = await m.key()
  t.same((await call(`${m.url}/healthz`)).body, { status: 'ok' })
  t.same((await call(`${m.url}/readyz`)).body, { status: 'ready', pipelines: { traces: 'running', logs: 'running', usage: 'running' } })
  const body = completion()
  t.equal((await call(`${m.url}/meter/v2/ai/completions`, { key, body })).status, 201)
  t.equal((await call(`${m.url}/meter/v2/ai/completions`, { key, body: completion({ model: 7 }) })).status, 400)
  const unattributed = completion()
  delete unattributed.organizationName
  t.equal((await call(`${m.url}/meter/v2/ai/completions`, { key, body: unattributed })).status, 201, 'stored unattributed')

  t.equal((await call(`${m.url}/no/such/path-4711`, { key })).status, 404)
  const metrics = await call(`${m.url}/metrics`)
  t.match(metrics.headers.get('content-type'), /text\/plain/)
  t.match(metrics.text, /route="unmatched",status="404"/, 'a path without a route is one series')
  t.notMatch(metrics.text, 'path-4711', 'raw paths never become labels')
  for (const line of [
    'meterd_component_accepted_items_total{kind="receiver",component="metering"} 2',
    'meterd_component_refused_items_total{kind="receiver",component="metering"} 1',
    'meterd_component_accepted_items_total{kind="exporter",component="lmdb"} 2',
    'meterd_component_accepted_items_total{kind="exporter",component="debug"} 2',
    'meterd_unattributed_records_total{kind="completion"} 1',
    'meterd_component_failed_items_total{kind="exporter",component="lmdb"} 0',
  ])
    t.ok(metrics.text.includes(line), line)
  t.match(metrics.text, /^process_resident_memory_bytes \d+/m, "Node's process metrics under their standard names")
  t.match(metrics.text, /^nodejs_eventloop_lag_seconds /m, 'and nodejs_* as stock dashboards expect')
  t.notMatch(metrics.text, /^meterd_(process|nodejs)_/m, 'not prefixed')
  t.match(metrics.text, /^meterd_http_request_duration_seconds_count\{method="POST",route="\/meter\/v2\/ai\/completions",status="201"\} 2$/m, 'requests by route template and status')
  t.match(metrics.text, /^meterd_http_request_duration_seconds_count\{method="POST",route="\/meter\/v2\/ai\/completions",status="400"\} 1$/m)
  t.match(metrics.text, /^meterd_http_request_duration_seconds_bucket\{le="0\.1",method="POST",route="\/meter\/v2\/ai\/completions",status="201"\} \d+$/m, 'with a latency histogram')
  for (const g of ['meterd_store_file_bytes', 'meterd_store_used_bytes', 'meterd_store_max_bytes', 'meterd_store_filesystem_free_bytes'])
    t.match(metrics.text, new RegExp(`^${g} [1-9]\\d*$`, 'm'), `${g}: the data directory's size and free space`)
  t.match(metrics.text, /^# HELP meterd_store_max_bytes .*not a bound/m, 'max_size_mb is not passed off as the most the data file may grow to')
  t.match(metrics.text, /^meterd_build_info\{version="\d+\.\d+\.\d+",node="\d+\.\d+\.\d+"\} 1$/m, 'build info')
  t.notMatch(metrics.text, /kind="extension"/, 'no item counters for extensions, which handle no items')
  // Counts accumulate between scrapes and are never counted twice.
  t.equal((await call(`${m.url}/meter/v2/ai/completions`, { key, body: completion() })).status, 201)
  const again = (await call(`${m.url}/metrics`)).text
  t.ok(again.includes('meterd_component_accepted_items_total{kind="receiver",component="metering"} 3'), 'a second scrape: 3 accepted')
  t.ok(again.includes('meterd_unattributed_records_total{kind="completion"} 1'), 'still 1 unattributed')

  const logged = m.logs.map((l) => JSON.parse(l)).find((l) => l.msg === 'debug exporter')
  t.equal(logged?.item?.body?.transactionId, body.transactionId, 'the debug exporter logs records through pino')
  t.equal(logged?.component, 'debug')

  await m.close()
  const lines = m.logs.map((l) => JSON.parse(l))
  t.ok(lines.some((l) => l.msg === 'meterd stopped'), 'logs are JSON lines')
})

t.test('a data directory whose name has a dot holds the store like any other', async (t) => {
  // lmdb-js alone would take `meterd.d` for a file name and fail to open it.
  const parent = tempDir('meterd-dotted-')
  t.teardown(() => removeDir(parent))
  const dataDir = join(parent, 'meterd.d')
  const m = await startMeterd(t, { dataDir })
  const res = await call(`${m.url}/meter/v2/ai/completions`, { key: ADMIN_KEY, body: completion() })
  t.equal(res.status, 201, 'a record is stored')
  t.ok(statSync(dataDir).isDirectory() && existsSync(join(dataDir, 'data.mdb')), 'in data.mdb inside the directory')
  const back = await call(`${m.url}/profitstream/v2/api/sources/metrics/ai/completions?size=5`, { key: ADMIN_KEY })
  t.equal(back.body._embedded.aICompletionMetricResourceList.length, 1, 'and reads back')
})
