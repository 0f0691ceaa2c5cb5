import t from 'tap'
import { Store } from '../../src/store/store.js'
import { ToolAggregates } from '../../src/domain/pricing/aggregates.js'
import type { UsageRecord } from '../../src/model/usage-record.js'
import { call, removeDir, startMeterd, tempDir } from '../helpers/meterd.js'
import { completion } from '../fixtures/wire-examples.js'

// The dedup table is also the transactionId index (src/store/usage-store.ts): these are the
// lookups a user makes by transactionId, whatever the dedup window did in between.

const C = '/meter/v2/ai/completions'
const LIST = '/profitstream/v2/api/sources/metrics/ai/completions'
const HOUR = 3_600_000

const ids = (res: { body: any }) => res.body._embedded.aICompletionMetricResourceList.map((r: any) => r.id)

t.test('a transactionId reused after each window lists every record, newest first, and pages', async (t) => {
  const m = await startMeterd(t, { frozenNow: Date.UTC(2026, 10, 21, 12) })
  const key = await m.key()
  const body = completion()
  const stored: string[] = []
  for (let i = 0; i < 3; i++) {
    if (i > 0) m.clock.advance(25 * HOUR)
    stored.push((await call(m.url + C, { key, body })).body.id)
  }
  t.equal(new Set(stored).size, 3, 'three records, one per window')
  const url = `${m.url}${LIST}?transactionId=${encodeURIComponent(body.transactionId)}`
  const all = await call(url, { key })
  t.same(ids(all), [...stored].reverse(), 'newest first')
  t.equal(all.body.page.totalElements, 3)
  t.same(ids(await call(`${url}&size=2&page=1`, { key })), [stored[0]], 'the second page holds the oldest')
  // A retry of the latest is still deduplicated after the older ones were displaced.
  t.equal((await call(m.url + C, { key, body })).body.id, stored[2], 'within its window the latest id is answered')
})

t.test('transactionId lookups outlive the dedup window and the replay sweep', async (t) => {
  const m = await startMeterd(t, { frozenNow: Date.UTC(2026, 10, 21, 12) })
  const key = await m.key()
  const body = completion()
  const first = (await call(m.url + C, { key, body })).body.id
  m.clock.advance(60 * 24 * HOUR) // beyond every retention
  await m.service.store.usage.sweep(m.clock.now, HOUR)
  const found = await call(`${m.url}${LIST}?transactionId=${encodeURIComponent(body.transactionId)}`, { key })
  t.same(ids(found), [first], 'still found by transactionId')
  const again = await call(m.url + C, { key, body })
  t.not(again.body.id, first, 'but the window has passed: the same transactionId is a new record')
})

t.test('dedup and the transactionId lookup stay inside the team and the kind (issue 15 #1)', async (t) => {
  const m = await startMeterd(t)
  const a = await m.key({ team: 'team-a' })
  const b = await m.key({ team: 'team-b' }) // the same account: the rate-limit unit, not the dedup unit
  const other = await m.key({ team: 'team-c', account: 'acct-2' })
  const body = completion()
  const mine = (await call(m.url + C, { key: a, body })).body.id
  const theirsB = await call(m.url + C, { key: b, body: { ...body, model: 'gpt-4o', inputTokenCount: 99, totalTokenCount: 104 } })
  t.equal(theirsB.status, 201)
  t.not(theirsB.body.id, mine, 'another team of the account stores its own record under the same transactionId')
  t.equal((await call(m.url + C, { key: b, body })).body.id, theirsB.body.id, "and its retry is deduplicated against its own, not team a's")
  const theirs = (await call(m.url + C, { key: other, body })).body.id
  const lookup = (key: string) => call(`${m.url}${LIST}?transactionId=${encodeURIComponent(body.transactionId)}`, { key })
  t.same(ids(await lookup(a)), [mine])
  const seenByB = await lookup(b)
  t.same(ids(seenByB), [theirsB.body.id], 'team b finds its own record under the transactionId')
  t.match(seenByB.body._embedded.aICompletionMetricResourceList[0], { model: 'gpt-4o', inputTokenCount: 99 }, "with its own usage, not team a's")
  t.same(ids(await lookup(other)), [theirs], 'the other account sees its own record only')
  const tools = await call(`${m.url}/profitstream/v2/api/sources/metrics/tool/events?transactionId=${encodeURIComponent(body.transactionId)}`, { key: a })
  t.equal(tools.body.page.totalElements, 0, 'a completion is not a tool event')
})

t.test('records indexed by an earlier version (an x entry, no dedup entry) are still found', async (t) => {
  const dir = tempDir('meterd-txindex-')
  const store = new Store({ path: dir })
  t.teardown(async () => {
    await store.close()
    removeDir(dir)
  })
  const usage = store.usage
  const old = {
    id: '01KAAAAAAAAAAAAAAAAAAAAAAA',
    kind: 'completion',
    body: { transactionId: 'tx-old' },
    eventTime: '2026-01-01T00:00:00.000Z',
    receivedAt: '2026-01-01T00:00:00.000Z',
    caller: { account: 'acct-1', tenant: '', team: 'team-a', environment: '', keyId: 'k' },
    attribution: {},
    attributed: false,
  } as unknown as UsageRecord
  await store.root.transaction(() => {
    usage.records.put(old.id, old)
    usage.index.put(['x', 'team-a', 'completion', 'tx-old', old.id], null)
  })
  const q = { team: 'team-a', kind: 'completion' as const, transactionId: 'tx-old', page: 0, size: 10 }
  t.same(usage.list(q).records.map((r) => r.id), [old.id])
  // A new record under the same transactionId joins it; the old one is listed once.
  const next = { ...old, id: '01KBBBBBBBBBBBBBBBBBBBBBBB', eventTime: '2026-02-01T00:00:00.000Z' } as UsageRecord
  await store.root.transaction(() => usage.writeInTransaction([next], { dedupWindowMs: HOUR, now: Date.now() }))
  t.same(usage.list(q).records.map((r) => r.id), [next.id, old.id])
  t.same(usage.list({ ...q, from: '2026-01-15T00:00:00.000Z' }).records.map((r) => r.id), [next.id], 'from applies')
})

t.test('dedup entries and tool aggregates written by earlier builds (plain msgpack) still read after the switch to shared structures', async (t) => {
  const dir = tempDir('meterd-compat-')
  const before = new Store({ path: dir })
  const plainAggregates = before.root.openDB({ name: 'tool-aggregates' })
  const plainDedup = before.root.openDB({ name: 'usage-dedup' })
  await before.root.transaction(() => {
    plainAggregates.put(['s', 'n'], { n: 7, nv: 7, sum: '21', max: '3', distinct: 0 })
    plainDedup.put(['team-1', 'tool', 'tx-1'], { id: 'R1', at: 5 })
    // Written by a build of layout 2, which kept dedup entries in lmdb-js's array keys (usage-layout.ts).
    before.db('meta').put('usage.layout', 2)
  })
  await before.close()

  const store = new Store({ path: dir })
  t.teardown(async () => {
    await store.close()
    removeDir(dir)
  })
  const aggregates = new ToolAggregates(store)
  t.same(aggregates.get(['s'], 'n'), { n: 7, nv: 7, sum: '21', max: '3', distinct: 0 })
  t.equal(store.usage.findDuplicate('team-1', 'tool', 'tx-1', HOUR, 10), 'R1')
  const el = { name: 'n', aggregationType: 'COUNT' as const, tiersMode: 'volume' as const, unitPrice: '1', tiers: [] }
  await aggregates.apply([{ recordId: 'R2', scope: ['s'], elements: [el], usageMetadata: undefined }], 0)
  t.equal(aggregates.get(['s'], 'n').n, 8, 'an old aggregate moves on from where it was')
})
