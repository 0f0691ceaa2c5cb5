/**
 * The components that read usage records depend on the usage-records port (Host.usage,
 * src/ports/usage.ts), not on the Store's databases (issue 19 §4). Here the host's `usage` is the
 * LMDB adapter over another data directory than `store`: the records are only reachable through
 * the port, so a component that still read `store.usage` would find none.
 */
import pino from 'pino'
import { Registry } from 'prom-client'
import t, { type Test } from 'tap'
import type { Host } from '../../src/host/component.js'
import { LOCAL } from '../../src/core/cluster/bus.js'
import { componentMetrics } from '../../src/core/telemetry.js'
import { totals } from '../../src/domain/analytics/index.js'
import { AnalyticsExporter } from '../../src/exporters/analytics/index.js'
import { LmdbExporter } from '../../src/exporters/lmdb/index.js'
import { EMPTY_ATTRIBUTION, type UsageRecord } from '../../src/model/usage-record.js'
import type { Route } from '../../src/transport/http/server.js'
import { Store } from '../../src/store/store.js'
import { removeDir, tempDir } from '../helpers/meterd.js'

const T0 = Date.parse('2026-11-01T00:00:00Z')

function record(i: number, unpriced = false): UsageRecord {
  return {
    id: `id-${String(i).padStart(6, '0')}`,
    kind: 'completion',
    eventTime: new Date(T0 + i * 1000).toISOString(),
    receivedAt: new Date(T0).toISOString(),
    caller: { account: 'a', tenant: 't', team: 'team-a', environment: 'prod', keyId: 'k' },
    attribution: { ...EMPTY_ATTRIBUTION, traceId: `tr-${i % 10}` },
    attributed: false,
    cost: unpriced ? { currency: 'USD', total: '0', parts: {}, source: 'unpriced', note: 'unknown_model' } : { currency: 'USD', total: '0.5', parts: {}, source: 'client' },
    body: { model: 'm', provider: 'p', inputTokenCount: 1, outputTokenCount: 1, totalTokenCount: 2, stopReason: 'END', requestTime: '', completionStartTime: '', responseTime: '', requestDuration: 1 },
  } as UsageRecord
}

function open(t: Test): Store {
  const dir = tempDir('meterd-usage-port-')
  const store = new Store({ path: dir })
  t.teardown(async () => {
    await store.close()
    removeDir(dir)
  })
  return store
}

const settings = (id: string) => ({ id, logger: pino({ level: 'silent' }), metrics: componentMetrics(new Registry(), 'exporter', id), registry: new Registry() })

t.test('the read API, the analytics rebuild and its reprice watch read through Host.usage', async (t) => {
  const elsewhere = open(t) // the records
  const own = open(t) // the host's Store: no records
  const N = 40
  await elsewhere.root.transaction(() => elsewhere.usage.writeInTransaction([...Array(N).keys()].map((i) => record(i, i === 0)), { dedupWindowMs: 0, now: T0 }))

  const routes: Route[] = []
  const host = {
    store: own,
    usage: elsewhere.usage,
    cluster: LOCAL,
    server: { api_prefix: 'profitstream' },
    http: { route: (r: Route) => routes.push(r) },
    now: () => T0 + N * 1000,
  } as unknown as Host

  // The read API (lmdb exporter).
  const lmdb = new LmdbExporter(settings('lmdb'), { query_api: true, dedup_sweep_minutes: 60, retention_hours: 840 })
  await lmdb.start({ ...host, cluster: { ...LOCAL, leader: false } } as unknown as Host)
  const list = routes.find((r) => r.path.endsWith('/ai/completions'))!
  const ctx = { principal: { team: 'team-a' }, query: new URLSearchParams('size=5&traceId=tr-3') }
  const reply = (await list.handler(ctx as never)) as { status: number; body: any }
  t.equal(reply.status, 200)
  t.equal(reply.body.page.totalElements, N / 10, 'the read API lists the records of a trace')

  // The analytics exporter: its rebuild reads every record, and its watch follows a reprice.
  const analytics = new AnalyticsExporter(settings('analytics'), { query_api: false, max_buckets: 2000, reprice_poll_ms: 1000 } as never)
  await analytics.start(host)
  t.teardown(() => analytics.shutdown())
  await analytics.whenReady()
  const all = totals(analytics.index.team('team-a'), { from: -Infinity, to: Infinity, filters: [] })
  t.equal(all.records, N, 'the rebuild counted every record')
  t.equal(analytics.index.unpricedCount, 1, 'one of them unpriced')
  // `meterd reprice` prices it (another process): the record takes a price and leaves the unpriced list.
  const priced = { ...record(0), cost: { currency: 'USD', total: '2', parts: {}, source: 'price_book' } } as UsageRecord
  await elsewhere.root.transaction(() => {
    elsewhere.usage.records.put(priced.id, priced)
    elsewhere.usage.index.remove(['u', 'team-a', 'completion', priced.eventTime, priced.id])
  })
  t.equal((analytics as any).watch.poll(), 1, 'the reprice watch saw it')
  t.equal(totals(analytics.index.team('team-a'), { from: -Infinity, to: Infinity, filters: [] }).cost, 21_500_000_000_000n, 'and the totals take its price')
})
