/**
 * A worker's analytics when another worker dies (src/exporters/analytics/index.ts, reconcile): the
 * dead worker's records that are stored but were never announced are read back from the store,
 * and no record is counted twice, whichever way it arrives (announced before the death, found in
 * the store, announced by a live worker after the read-back, or committed here). A real LMDB
 * store; the cluster bus is a stand-in through which the test plays the other workers (the real
 * bus's end-of-peer signal is tested in test/cluster/peers.test.ts, the whole with real worker
 * processes killed under load in test/cluster/workers.test.ts).
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pino from 'pino'
import { Registry } from 'prom-client'
import t, { type Test } from 'tap'
import type { ClusterBus } from '../../src/core/cluster/bus.js'
import type { Host } from '../../src/host/component.js'
import { idTimePrefix, newId } from '../../src/core/ids.js'
import { componentMetrics } from '../../src/core/telemetry.js'
import { totals } from '../../src/domain/analytics/index.js'
import { PeerRows, readRow, RowInput } from '../../src/domain/analytics/row.js'
import { AnalyticsExporter } from '../../src/exporters/analytics/index.js'
import { EMPTY_ATTRIBUTION, type UsageRecord } from '../../src/model/usage-record.js'
import { Store } from '../../src/store/store.js'

function record(id: string, cost: string): UsageRecord {
  return {
    id,
    kind: 'completion',
    eventTime: new Date().toISOString(),
    receivedAt: new Date().toISOString(),
    caller: { account: 'a', tenant: 't', team: 'team-a', environment: 'prod', keyId: 'k' },
    attribution: { ...EMPTY_ATTRIBUTION, agent: 'agent', traceId: `tr-${id}` },
    attributed: false,
    cost: { currency: 'USD', total: cost, parts: {}, source: 'client' },
    body: { model: 'm', provider: 'p', inputTokenCount: 1, outputTokenCount: 1, totalTokenCount: 2, stopReason: 'END', requestTime: '', completionStartTime: '', responseTime: '', requestDuration: 1 },
  }
}

/** The bus of worker 0 of two: what the others publish and their end are played by the test. */
function bus() {
  const topics = new Map<string, (data: unknown) => void>()
  const gone: ((peer: number) => void)[] = []
  const back: ((peer: number) => void)[] = []
  const published: { topic: string; data: unknown }[] = []
  const b: ClusterBus = {
    workers: 2,
    index: 0,
    leader: true,
    publish: (topic, data) => void published.push({ topic, data }),
    subscribe: (topic, fn) => (topics.set(topic, fn), () => topics.delete(topic)),
    request: () => Promise.reject(new Error('no supervisor here')),
    answer: () => undefined,
    unresponsiveSince: () => undefined,
    onPeerGone: (fn) => (gone.push(fn), () => undefined),
    onPeerRejoined: (fn) => (back.push(fn), () => undefined),
  }
  return {
    bus: b,
    /** Another worker's announcement of `records`, as its analytics exporter sends it. */
    announce(records: UsageRecord[]) {
      const rows = new PeerRows()
      const row = new RowInput()
      for (const r of records) {
        readRow(r, row)
        rows.push(r.id, r.caller.team, false, row)
      }
      topics.get('analytics.rows')!(rows.take())
    },
    end: (peer: number) => gone.forEach((fn) => fn(peer)),
    /** Another worker's word that every record it may store unannounced was made at or after `ms`. */
    floor: (peer: number, ms: number) => topics.get('analytics.floor')!([peer, ms]),
    /** What this worker published. */
    published,
    /** The bus's word that `peer`, cut off for a while, sends and is sent to again. */
    rejoined: (peer: number) => back.forEach((fn) => fn(peer)),
  }
}

const store_ = (store: Store, records: UsageRecord[]) => store.durable(store.root.transaction(() => store.usage.writeInTransaction(records, { dedupWindowMs: 0, now: Date.now() })))

/** A worker 0 of two over a fresh store, with the other worker played through the stand-in bus. */
async function survivor(t: Test) {
  const dir = mkdtempSync(join(tmpdir(), 'meterd-reconcile-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const store = new Store({ path: dir })
  t.teardown(() => store.close())
  const b = bus()
  const exporter = new AnalyticsExporter(
    { id: 'analytics', logger: pino({ level: 'silent' }), metrics: componentMetrics(new Registry(), 'exporter', 'analytics'), registry: new Registry() },
    { query_api: false, max_buckets: 2000, backend: 'embedded', clickhouse_exporter: 'clickhouse', reprice_poll_ms: 1000 },
  )
  await exporter.start({ store, usage: store.usage, cluster: b.bus, now: () => Date.now() } as unknown as Host)
  t.teardown(() => exporter.shutdown())
  await exporter.whenReady()
  const counted = () => totals(exporter.index.team('team-a'), { from: -Infinity, to: Infinity, filters: [] })
  return { store, b, exporter, counted }
}

t.test('a dead worker\'s stored records are counted once; a live worker\'s late announcement is not counted twice', async (t) => {
  const { store, b, exporter, counted } = await survivor(t)

  const make = (n: number, cost: string) => Array.from({ length: n }, () => record(newId(), cost))
  // Worker 1 stores 30 records and announces them, then stores 20 more and dies before announcing them.
  const announced = make(30, '0.000001')
  const unannounced = make(20, '0.000002')
  await store_(store, announced)
  b.announce(announced)
  await store_(store, unannounced)
  // Worker 2 (alive) has stored 10 whose announcement is still on its way.
  const late = make(10, '0.000004')
  await store_(store, late)
  // This worker's own records, committed through its pipeline.
  const own = make(5, '0.000008')
  const unit = store.unit()
  unit.add(() => store.usage.writeInTransaction(own, { dedupWindowMs: 0, now: Date.now() }))
  await exporter.consumers.usage.consume({ items: own, ctx: { unit } } as never)
  t.equal(counted().records, 35, 'before the end: what was announced and what was committed here')

  b.end(1)
  for (let i = 0; i < 200 && counted().records < 65; i++) await new Promise((r) => setTimeout(r, 5))
  t.equal(counted().records, 65, 'worker 1\'s unannounced records are read back, and worker 2\'s stored ones with them')
  b.announce(late)
  // A second end (another connection of the same worker, or another worker) finds nothing new.
  b.end(1)
  await new Promise((r) => setTimeout(r, 50))
  const all = counted()
  t.equal(all.records, 65, 'worker 2\'s announcement, arriving after the read-back, adds nothing')
  t.equal(all.cost, (30n * 1n + 20n * 2n + 10n * 4n + 5n * 8n) * 1_000_000n, 'each record\'s cost once')
})

t.test('a worker cut off from another and joined again reads the store again: every record once, however it arrives', async (t) => {
  const { store, b, exporter, counted } = await survivor(t)
  const make = (n: number, cost: string) => Array.from({ length: n }, () => record(newId(), cost))
  const own = async (records: UsageRecord[]) => {
    const unit = store.unit()
    unit.add(() => store.usage.writeInTransaction(records, { dedupWindowMs: 0, now: Date.now() }))
    await exporter.consumers.usage.consume({ items: records, ctx: { unit } } as never)
  }

  // Worker 1 announces 30 records; then it is cut off, and the rows of 20 more never arrive.
  const announced = make(30, '0.000001')
  await store_(store, announced)
  b.announce(announced)
  await store_(store, make(20, '0.000002'))
  await own(make(5, '0.000004'))
  // 3 of this worker's own are committed, but the commit's answer is still on its way here.
  const straddling = make(3, '0.000008')
  await store_(store, straddling)
  let answer!: () => void
  const answered = new Promise<void>((r) => (answer = r))
  const consumed = exporter.consumers.usage.consume({ items: straddling, ctx: { unit: { commit: () => answered } } } as never)
  // Worker 2's 6, stored, their announcement on its way.
  const late = make(6, '0.000016')
  await store_(store, late)
  t.equal(counted().records, 35, 'before: what was announced and committed here')

  b.rejoined(1)
  t.notOk(exporter.ready, 'the queries wait while the store is read again')
  answer()
  await consumed
  b.announce(late)
  // After the read began: worker 1's new records, announced, and this worker's own.
  const after = make(10, '0.000032')
  await store_(store, after)
  b.announce(after)
  await own(make(4, '0.000064'))
  await exporter.whenReady()
  await new Promise((r) => setTimeout(r, 50))
  const all = counted()
  t.equal(all.records, 30 + 20 + 5 + 3 + 6 + 10 + 4, 'the 20 whose rows were lost are counted, and nothing twice')
  t.equal(all.cost, (30n * 1n + 20n * 2n + 5n * 4n + 3n * 8n + 6n * 16n + 10n * 32n + 4n * 64n) * 1_000_000n, 'each record\'s cost once')
  t.ok(exporter.ready)
})

/** An id made at `ms` (newId only makes ids later than the last it made). */
const madeAt = (ms: number, n: number) => idTimePrefix(ms) + String(n).padStart(16, '0')

t.test('a dead worker\'s record committed long after it arrived (a stalled disk) is read back from the floor it told', async (t) => {
  const { store, b, counted } = await survivor(t)
  const now = Date.now()
  // Worker 1 has a batch made 60 s ago still on its way to the disk: it told so.
  b.floor(1, now - 60_000)
  // Meanwhile it stored and announced newer ones, made 30 s ago and now.
  const announced = [record(madeAt(now - 30_000, 1), '0.000001'), record(newId(), '0.000001')]
  await store_(store, announced)
  b.announce(announced)
  // The commit of the old batch comes through, and worker 1 is killed before announcing it.
  await store_(store, [record(madeAt(now - 60_000, 1), '0.000002'), record(madeAt(now - 60_000, 2), '0.000002')])
  t.equal(counted().records, 2)
  b.end(1)
  for (let i = 0; i < 200 && counted().records < 4; i++) await new Promise((r) => setTimeout(r, 5))
  await new Promise((r) => setTimeout(r, 50))
  const all = counted()
  t.equal(all.records, 4, 'the two made 60 s before their commit are read back; the announced ones are not counted again')
  t.equal(all.cost, (2n * 1n + 2n * 2n) * 1_000_000n)
})

t.test('a worker tells the others its floor: lowered before the commit of a batch made before it, raised once that batch is announced', async (t) => {
  const { store, b, exporter } = await survivor(t)
  const floors = () => b.published.filter((p) => p.topic === 'analytics.floor').map((p) => (p.data as [number, number])[1])
  const first = floors()
  t.equal(first.length, 1, 'told at start')
  t.ok(first[0] <= Date.now() && first[0] > Date.now() - 5000, 'about now')
  const old = Date.now() - 60_000
  const late = [record(madeAt(old, 1), '0.000001')]
  let answer!: () => void
  const answered = new Promise<void>((r) => (answer = r))
  const unit = store.unit()
  unit.add(() => store.usage.writeInTransaction(late, { dedupWindowMs: 0, now: Date.now() }))
  const consumed = exporter.consumers.usage.consume({ items: late, ctx: { unit: { commit: () => unit.commit().then(() => answered) } } } as never)
  t.equal(floors().at(-1), old, 'lowered to the batch\'s oldest id at once, before its commit is answered')
  // Held there while the batch is unannounced (a tick passes).
  await new Promise((r) => setTimeout(r, 1100))
  t.equal(floors().at(-1), old, 'held while the batch is on its way')
  answer()
  await consumed
  t.equal(b.published.filter((p) => p.topic === 'analytics.rows').length, 1, 'announced')
  await new Promise((r) => setTimeout(r, 1100))
  t.ok(floors().at(-1)! > Date.now() - 5000, 'raised again once announced')

})
