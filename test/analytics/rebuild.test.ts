import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pino from 'pino'
import { Registry } from 'prom-client'
import t from 'tap'
import type { Host } from '../../src/host/component.js'
import { LOCAL } from '../../src/core/cluster/bus.js'
import { componentMetrics } from '../../src/core/telemetry.js'
import { totals } from '../../src/domain/analytics/index.js'
import { AnalyticsExporter } from '../../src/exporters/analytics/index.js'
import { EMPTY_ATTRIBUTION, type UsageRecord } from '../../src/model/usage-record.js'
import { Store } from '../../src/store/store.js'

const T0 = Date.parse('2026-11-01T00:00:00Z')

function record(id: string, i: number): UsageRecord {
  return {
    id,
    kind: 'completion',
    eventTime: new Date(T0 + i * 1000).toISOString(),
    receivedAt: new Date(T0).toISOString(),
    caller: { account: 'a', tenant: 't', team: 'team-a', environment: 'prod', keyId: 'k' },
    attribution: { ...EMPTY_ATTRIBUTION, agent: `agent-${i % 7}`, traceId: `tr-${i % 500}` },
    attributed: false,
    cost: { currency: 'USD', total: '0.000001', parts: {}, source: 'client' },
    body: { model: 'm', provider: 'p', inputTokenCount: 1, outputTokenCount: 1, totalTokenCount: 2, stopReason: 'END', requestTime: '', completionStartTime: '', responseTime: '', requestDuration: 1 },
  }
}

// Ids spread over one space, stored ones and live ones interleaved: a live record commits
// before or behind the position the scan has reached, by chance.
const idOf = (n: number) => `id-${String(n).padStart(8, '0')}`

t.test('records arriving while the stored ones are read back are each counted once', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'meterd-rebuild-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const store = new Store({ path: dir })
  t.teardown(() => store.close())
  const STORED = 60_000
  const LIVE = 3_000
  const live = new Set<number>()
  while (live.size < LIVE) live.add(Math.floor(Math.random() * (STORED + LIVE)))
  const storedIds = [...Array(STORED + LIVE).keys()].filter((n) => !live.has(n))
  for (let i = 0; i < storedIds.length; i += 5000) {
    const batch = storedIds.slice(i, i + 5000).map((n) => record(idOf(n), n))
    await store.root.transaction(() => store.usage.writeInTransaction(batch, { dedupWindowMs: 0, now: T0 }))
  }

  const exporter = new AnalyticsExporter(
    { id: 'analytics', logger: pino({ level: 'silent' }), metrics: componentMetrics(new Registry(), 'exporter', 'analytics'), registry: new Registry() },
    { query_api: false, max_buckets: 2000, reprice_poll_ms: 1000 },
  )
  await exporter.start({ store, usage: store.usage, cluster: LOCAL, now: () => Date.now() } as unknown as Host)
  t.teardown(() => exporter.shutdown())
  t.notOk(exporter.ready, 'still reading')

  // Live batches as the pipeline hands them over: the store's step in the request's write unit.
  const pending: Promise<void>[] = []
  let sentWhileReading = 0
  for (const n of live) {
    const r = record(idOf(n), n)
    const unit = store.unit()
    unit.add(() => store.usage.writeInTransaction([r], { dedupWindowMs: 0, now: T0 }))
    pending.push(exporter.consumers.usage.consume({ items: [r], ctx: { unit } }))
    if (!exporter.ready) sentWhileReading++
    // The read yields after each chunk of 4,096; spread the live records over its chunks.
    if (pending.length % 150 === 0) await new Promise((r) => setImmediate(r))
  }
  await Promise.all(pending)
  await exporter.whenReady()
  t.ok(sentWhileReading >= LIVE / 2, `${sentWhileReading} of ${LIVE} live records arrived while the stored ones were read`)
  const all = totals(exporter.index.team('team-a'), { from: -Infinity, to: Infinity, filters: [] })
  t.equal(all.records, STORED + LIVE, 'every record once')
  t.equal(all.cost, BigInt(STORED + LIVE) * 1_000_000n, 'cost counted once per record')
  t.equal(all.traces, 500)
})
