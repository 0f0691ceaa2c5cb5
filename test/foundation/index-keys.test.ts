/**
 * Usage layout 4: the index and dedup entries have keys in the encoding of src/store/tuple-key.ts
 * (compared by memcmp) in the databases `usage-index.4` and `usage-dedup.4`. The keys order and
 * read back as lmdb-js's own array keys did, and a data directory of layout 3 (the same keys in
 * `usage-index` and `usage-dedup`) opens with every read giving what it gave before.
 */
import { join } from 'node:path'
import { open } from 'lmdb'
import t from 'tap'
import type { UsageKind, UsageRecord } from '../../src/model/usage-record.js'
import type { ListQuery } from '../../src/ports/usage.js'
import { Store } from '../../src/store/store.js'
import { RANGE_END, tupleKeyEncoder } from '../../src/store/tuple-key.js'
import { USAGE_LAYOUT } from '../../src/store/usage-layout.js'
import { walkStore } from '../../src/store/walk.js'
import { removeDir, tempDir } from '../helpers/meterd.js'

const STRUCTURES = Symbol.for('structures')
const HOUR = 3_600_000

/** Element by element, each by its UTF-8 bytes, a shorter key before the keys it starts: lmdb-js's array key order. */
function byUtf8(a: string[], b: string[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    const c = Buffer.compare(Buffer.from(a[i]!, 'utf8'), Buffer.from(b[i]!, 'utf8'))
    if (c !== 0) return c
  }
  return a.length - b.length
}

t.test('index keys order element by element, as lmdb-js array keys did, and read back as written', async (t) => {
  const dir = tempDir('meterd-index-keys-')
  const store = new Store({ path: join(dir, 'data') })
  t.teardown(async () => {
    await store.close()
    removeDir(dir)
  })
  // Control characters around the escape, a prefix of another string, non-ASCII in one to four bytes.
  const words = ['', 'a', 'a\0', 'a\u0001', 'a\u0005', 'a\u0006', 'a b', 'ab', 'b', '\u0004x', '\u0000', 'é', 'z', '☕', '\uffff', '😀', 'Zürich']
  const keys: string[][] = []
  for (const w of words) {
    keys.push(['k', w])
    for (const v of ['', 'a', '😀']) keys.push(['k', w, v])
  }
  const ordered = store.db<string[], null>('ordered-binary-keys') // lmdb-js's own array keys, for comparison
  await store.durable(
    store.root.transaction(() => {
      for (const k of [...keys].reverse()) {
        store.usage.index.put(k, null)
        ordered.put(k, null)
      }
    }),
  )
  const expected = [...keys].sort(byUtf8)
  t.same([...store.usage.index.getKeys({ start: ['k'], end: ['k', RANGE_END] })], expected, 'every key back, in UTF-8 order element by element')
  t.same([...ordered.getKeys({})], expected, "the order lmdb-js's array keys have")
  t.same(
    [...store.usage.index.getKeys({ start: ['k', 'a', RANGE_END], end: ['k', 'a'], reverse: true })],
    [['k', 'a', '😀'], ['k', 'a', 'a'], ['k', 'a', '']],
    'a prefix range, in reverse, holds exactly the keys under the prefix',
  )
  // A lone surrogate (JSON allows one in a transactionId) reads back as it was.
  const odd = ['k2', 'x\ud800', '\udc00y', 'é\ud83d']
  await store.durable(store.root.transaction(() => store.usage.index.put(odd, null)))
  t.same([...store.usage.index.getKeys({ start: ['k2'], end: ['k2', RANGE_END] })], [odd])
  t.throws(() => tupleKeyEncoder.writeKey(['k', 7], Buffer.alloc(64), 0), /array of strings/, 'a key of anything else is refused, not misencoded')
})

function rec(id: string, team: string, kind: UsageKind, eventTime: string, over: Record<string, unknown> = {}): UsageRecord {
  const unpriced = over.unpriced === true
  return {
    id,
    kind,
    body: kind === 'tool' ? { toolId: over.toolId ?? 'search', transactionId: over.tx ?? `tx-${id}` } : { model: 'm', transactionId: over.tx ?? `tx-${id}` },
    eventTime,
    receivedAt: eventTime,
    caller: { account: 'acct-1', tenant: 'tenant-1', team, environment: 'production', keyId: 'key_1' },
    attribution: { traceId: (over.traceId as string | undefined) ?? '' },
    attributed: true,
    cost: unpriced ? { currency: 'USD', total: '0', parts: {}, source: 'unpriced', note: 'unknown_model' } : { currency: 'USD', total: '1', parts: {}, source: 'client' },
  } as unknown as UsageRecord
}

/** Every read the usage port offers over the index and dedup entries, for the data set below. */
function reads(store: Store) {
  const u = store.usage
  const lists: ListQuery[] = []
  for (const team of ['team-a', 'équipe-β']) {
    for (const kind of ['completion', 'tool'] as const) {
      lists.push({ team, kind, page: 0, size: 50 })
      lists.push({ team, kind, page: 1, size: 2 })
      lists.push({ team, kind, from: '2026-01-02T00:00:00.000Z', to: '2026-01-04T00:00:00.000Z', page: 0, size: 50 })
      lists.push({ team, kind, traceId: 'trace-1', page: 0, size: 50 })
      lists.push({ team, kind, traceId: 'trace-1', from: '2026-01-03T00:00:00.000Z', page: 0, size: 50 })
      lists.push({ team, kind, toolId: 'search', page: 0, size: 50 })
      lists.push({ team, kind, transactionId: 'tx-again', page: 0, size: 50 })
    }
  }
  const ids = (rs: Iterable<UsageRecord>) => [...rs].map((r) => r.id)
  return {
    lists: lists.map((q) => {
      const { records, total } = u.list(q)
      return { q, ids: ids(records), total }
    }),
    window: ids(u.inWindow('team-a', '2026-01-02T00:00:00.000Z', '2026-01-05T00:00:00.000Z')),
    unpriced: ids(u.unpriced('team-a', 'completion')),
    unpricedRange: ids(u.unpriced('équipe-β', 'tool', '2026-01-01T00:00:00.000Z', '2026-01-03T00:00:00.000Z')),
    unpricedCount: u.unpricedCount(),
    unpricedIds: [...u.unpricedIds()].sort(),
    duplicates: ['A1', 'A2', 'A3', 'T1', 'B1'].map((id) => u.findDuplicate(id === 'B1' ? 'équipe-β' : 'team-a', id.startsWith('T') ? 'tool' : 'completion', `tx-${id}`, 100 * HOUR, 1_000 + 2 * HOUR)),
    again: u.findDuplicate('team-a', 'completion', 'tx-again', 100 * HOUR, 1_000 + 2 * HOUR),
  }
}

t.test('a data directory of usage layout 3 opens in layout 4 with every read as before', async (t) => {
  const dir = tempDir('meterd-index-keys-v3-')
  t.teardown(() => removeDir(dir))
  const path = join(dir, 'data')
  const store = new Store({ path })
  const write = (records: UsageRecord[], now: number) => store.durable(store.root.transaction(() => store.usage.writeInTransaction(records, { dedupWindowMs: HOUR, now })))
  await write(
    [
      rec('A1', 'team-a', 'completion', '2026-01-01T00:00:00.000Z', { traceId: 'trace-1' }),
      rec('A2', 'team-a', 'completion', '2026-01-03T00:00:00.000Z', { traceId: 'trace-1', unpriced: true }),
      rec('A3', 'team-a', 'completion', '2026-01-02T00:00:00.000Z'),
      rec('A4', 'team-a', 'completion', '2026-01-04T00:00:00.000Z', { unpriced: true, tx: 'tx-again' }),
      rec('T1', 'team-a', 'tool', '2026-01-02T00:00:00.000Z', { toolId: 'search', traceId: 'trace-1' }),
      rec('T2', 'team-a', 'tool', '2026-01-03T00:00:00.000Z', { toolId: 'fetch' }),
      rec('B1', 'équipe-β', 'completion', '2026-01-02T00:00:00.000Z', { traceId: 'trace-1' }),
      rec('B2', 'équipe-β', 'tool', '2026-01-02T00:00:00.000Z', { unpriced: true }),
    ],
    1_000,
  )
  // The same transactionId after the window: A5 displaces A4 from the dedup table ('x' entry).
  await write([rec('A5', 'team-a', 'completion', '2026-01-05T00:00:00.000Z', { tx: 'tx-again' })], 1_000 + 2 * HOUR)
  const before = reads(store)
  // What the reads give, so that a layout that lost or reordered entries both times is caught too.
  t.same(before.lists[0], { q: before.lists[0]!.q, ids: ['A5', 'A4', 'A2', 'A3', 'A1'], total: 5 }, 'team a by time, newest first')
  t.same(before.lists.find((l) => l.q.transactionId && l.q.team === 'team-a' && l.q.kind === 'completion')?.ids, ['A5', 'A4'])
  t.same(before.window, ['A3', 'A2', 'A4', 'T1', 'T2'])
  t.same(before.unpricedIds, ['A2', 'A4', 'B2'])
  t.same(before.duplicates, ['A1', 'A2', 'A3', 'T1', 'B1'])
  t.equal(before.again, 'A5')

  // Turn the directory into what a build of layout 3 wrote: the same keys and values in the
  // databases of lmdb-js's array keys (records are as layout 3 stored them).
  const index = [...store.usage.index.getKeys({ start: ['\u0006'], end: [RANGE_END] })]
  const dedup = [...store.usage.dedup.getRange({ start: ['\u0006'], end: [RANGE_END] })].map(({ key, value }) => ({ key, value }))
  t.equal(index.length, 20, 'every index entry')
  t.equal(dedup.length, 8, 'every dedup entry')
  await store.durable(
    store.root.transaction(() => {
      for (const k of index) store.usage.index.remove(k)
      for (const { key } of dedup) store.usage.dedup.remove(key)
    }),
  )
  await store.close()
  const old = open({ path, noSubdir: false, maxDbs: 64 })
  const oldIndex = old.openDB({ name: 'usage-index' })
  const oldDedup = old.openDB({ name: 'usage-dedup', sharedStructuresKey: STRUCTURES })
  await old.transaction(() => {
    for (const k of index) oldIndex.put(k, null)
    for (const { key, value } of dedup) oldDedup.put(key, value)
    old.openDB({ name: 'meta' }).put('usage.layout', 3)
  })
  await old.close()

  const reopened = new Store({ path })
  t.teardown(() => reopened.close())
  t.equal(reopened.db('meta').get('usage.layout'), USAGE_LAYOUT, 'the directory is now in the current layout')
  t.equal(USAGE_LAYOUT, 5)
  t.same(reads(reopened), before, 'every list, window, unpriced and dedup read gives what it gave in layout 3')
  t.equal(reopened.db('usage-index').getKeysCount({}), 0, 'the earlier index database is left empty')
  t.equal(reopened.db('usage-dedup').getKeysCount({}), 0, 'and the earlier dedup database')

  // Writing goes on where layout 3 left off: a retry inside the window is a duplicate; a new record lists first.
  const kept = await reopened.durable(
    reopened.root.transaction(() =>
      reopened.usage.writeInTransaction([rec('A6', 'team-a', 'completion', '2026-01-06T00:00:00.000Z', { tx: 'tx-again' }), rec('A7', 'team-a', 'completion', '2026-01-07T00:00:00.000Z')], {
        dedupWindowMs: HOUR,
        now: 1_000 + 2 * HOUR + 60_000,
      }),
    ),
  )
  t.same([...kept], [['A6', 'A5']], 'the migrated dedup entry still deduplicates')
  t.same(reopened.usage.list({ team: 'team-a', kind: 'completion', page: 0, size: 3 }).records.map((r) => r.id), ['A7', 'A5', 'A4'])
})

t.test('a new data directory is in the current layout from the start, with the index and dedup databases of layout 4 and none earlier', async (t) => {
  const dir = tempDir('meterd-index-keys-new-')
  t.teardown(() => removeDir(dir))
  const path = join(dir, 'data')
  const store = new Store({ path })
  t.equal(store.db('meta').get('usage.layout'), USAGE_LAYOUT)
  await store.close()
  const names = walkStore(path).map((d) => d.name)
  t.ok(names.includes('usage-index.4') && names.includes('usage-dedup.4'), 'the databases of layout 4')
  t.notOk(names.includes('usage-index') || names.includes('usage-dedup'), 'and none of the earlier ones')
})

t.test('a build of layout 3 refuses a directory of layout 4 instead of misreading it', async (t) => {
  // A build refuses any directory whose layout is newer than its own: layout 4 + 1 stands for what layout 3 sees here.
  const dir = tempDir('meterd-index-keys-newer-')
  t.teardown(() => removeDir(dir))
  const path = join(dir, 'data')
  const store = new Store({ path })
  await store.durable(store.db('meta').put('usage.layout', USAGE_LAYOUT + 1))
  await store.close()
  t.throws(() => new Store({ path }), /written by a newer meterd \(usage layout 6\)/)
})

t.test('a layout-3 directory with more entries than one move chunk keeps every one of them, in order', async (t) => {
  const dir = tempDir('meterd-index-keys-many-')
  t.teardown(() => removeDir(dir))
  const path = join(dir, 'data')
  const store = new Store({ path })
  await store.durable(store.root.transaction(() => store.usage.writeInTransaction([rec('M0', 'team-m', 'completion', '2026-02-01T00:00:00.000Z')], { dedupWindowMs: HOUR, now: 1_000 })))
  await store.close()
  // 25,000 index and 12,000 dedup entries (the move goes 10,000 at a time), written as layout 3 did.
  const indexKeys: string[][] = []
  for (let i = 0; i < 25_000; i++) indexKeys.push(['t', `team-${i % 7}`, 'completion', new Date(Date.UTC(2026, 0, 1) + i * 1000).toISOString(), `id-${i}`])
  const dedupKeys: string[][] = []
  for (let i = 0; i < 12_000; i++) dedupKeys.push([`team-${i % 3}`, 'completion', `tx-${i}`])
  const old = open({ path, noSubdir: false, maxDbs: 64 })
  const oldIndex = old.openDB({ name: 'usage-index' })
  const oldDedup = old.openDB({ name: 'usage-dedup', sharedStructuresKey: STRUCTURES })
  await old.transaction(() => {
    for (const k of indexKeys) oldIndex.put(k, null)
    for (const [i, k] of dedupKeys.entries()) oldDedup.put(k, { id: `id-${i}`, at: 1_000 })
    old.openDB({ name: 'meta' }).put('usage.layout', 3)
  })
  await old.close()

  const reopened = new Store({ path })
  t.teardown(() => reopened.close())
  const moved = [...reopened.usage.index.getKeys({ start: ['t'], end: ['t', RANGE_END] })].filter((k) => k[4] !== 'M0' && k[1] !== 'team-m')
  t.same(moved, [...indexKeys].sort(byUtf8), 'every index entry moved, in lmdb-js array-key order')
  t.equal(reopened.usage.dedup.getKeysCount({ start: ['\u0006'], end: [RANGE_END] }), 12_000 + 1, 'every dedup entry (and the record written before)')
  t.same(reopened.usage.dedup.get(['team-2', 'completion', 'tx-11999']), { id: 'id-11999', at: 1_000 }, 'values move unchanged')
  t.equal(reopened.db('usage-index').getKeysCount({}), 0, 'the earlier index database is left empty')
  t.equal(reopened.db('usage-dedup').getKeysCount({}), 0, 'and the earlier dedup database')
})
