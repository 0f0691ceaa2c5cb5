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

  const metrics = await call(`${m.url}/metrics`)
  t.match(metrics.headers.get('content-type'), /text\/plain/)
  for (const line of [
    'meterd_component_accepted_items_total{kind="receiver",component="metering"} 2',
    'meterd_component_refused_items_total{kind="receiver",component="metering"} 1',
    'meterd_component_accepted_items_total{kind="exporter",component="lmdb"} 2',
    'meterd_component_accepted_items_total{kind="exporter",component="debug"} 2',
    'meterd_unattributed_records_total{kind="completion"} 1',
    'meterd_component_failed_items_total{kind="exporter",component="lmdb"} 0',
  ])
    t.ok(metrics.text.includes(line), line)
  t.match(metrics.text, /meterd_process_resident_memory_bytes \d+/, 'process metrics too')
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
