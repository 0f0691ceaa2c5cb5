/**
 * Records are stored in a fixed layout around their msgpack body (src/store/record-codec.ts,
 * usage layout 3): every field reads back as it was written, and a data directory written by an
 * earlier build (records in plain msgpack, usage layout 2) opens with its records readable.
 */
import { execFileSync } from 'node:child_process'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { open } from 'lmdb'
import t from 'tap'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import type { UsageRecord } from '../../src/model/usage-record.js'
import { Store } from '../../src/store/store.js'
import { USAGE_LAYOUT } from '../../src/store/usage-layout.js'
import { removeDir, tempDir } from '../helpers/meterd.js'
import { usageRecord } from '../helpers/usage-record.js'

const STRUCTURES = Symbol.for('structures')

const record = usageRecord

t.test('a record in the fixed layout reads back field for field, whatever its text', async (t) => {
  const dir = tempDir('meterd-record-layout-')
  t.teardown(() => removeDir(dir))
  const store = new Store({ path: join(dir, 'data') })
  const plain = record('01PLAIN')
  const wide = record('01WIDE', {
    // Non-ASCII text, a string longer than 127 code units (a two-byte length), a lone-free emoji pair.
    attribution: { ...plain.attribution, organizationName: 'Zürich Café ☕ 😀', traceId: 't'.repeat(300), agent: 'ágent', region: '' },
    caller: { ...plain.caller, team: 'équipe-β' },
    attributed: false,
  })
  const priced = record('01PRICED', { cost: { currency: 'USD', total: '0.000004800000', parts: { input: '0.0000018', output: '0.000003' }, source: 'pricebook', priceVersion: 'v1' } })
  // A record carrying a field the layout does not know is kept whole (in msgpack), not trimmed.
  const extra = { ...record('01EXTRA'), note: 'kept' } as unknown as UsageRecord
  await store.durable(
    store.root.transaction(() => {
      for (const r of [plain, wide, priced, extra]) store.usage.records.put(r.id, r)
    }),
  )
  // Written outside a transaction too (lmdb-js keeps the bytes until its commit).
  const later = record('01LATER')
  await store.usage.records.put(later.id, later)

  for (const r of [plain, wide, priced, later]) {
    t.equal(store.usage.records.getBinary(r.id)?.[0], 0xc1, `${r.id} is stored in the fixed layout`)
    t.same(store.usage.get(r.id), r, `${r.id} reads back as written`)
    t.same(Object.keys(store.usage.get(r.id)!), Object.keys(r), `${r.id} keeps its field order`)
  }
  t.not(store.usage.records.getBinary(extra.id)?.[0], 0xc1, 'a record with an unknown field stays in msgpack')
  t.same(store.usage.get(extra.id), extra, 'and reads back with that field')
  const ranged = [...store.usage.records.getRange({})].map(({ value }) => value)
  t.same(ranged.map((r) => r.id).sort(), ['01EXTRA', '01LATER', '01PLAIN', '01PRICED', '01WIDE'], 'a range read decodes them too')
  t.same(ranged.find((r) => r.id === '01WIDE'), wide)
  await store.close()

  const again = new Store({ path: join(dir, 'data') })
  t.same(again.usage.get(wide.id), wide, 'and after the store is opened again')
  await again.close()
})

t.test('a dedup entry is stored in its fixed layout and reads back, as earlier ones do', async (t) => {
  const dir = tempDir('meterd-dedup-layout-')
  t.teardown(() => removeDir(dir))
  const store = new Store({ path: join(dir, 'data') })
  const entry = { id: '01JDENTRY0000000000000000A', at: 1_764_000_000_123 }
  const odd = { id: '01JDODD', at: 5, note: 'x' }
  await store.durable(
    store.root.transaction(() => {
      store.usage.dedup.put(['team-a', 'completion', 'tx-1'], entry)
      store.usage.dedup.put(['team-a', 'completion', 'tx-odd'], odd as unknown as { id: string; at: number })
    }),
  )
  t.equal(store.usage.dedup.getBinary(['team-a', 'completion', 'tx-1'])?.[0], 0xc1, 'in the fixed layout')
  t.same(store.usage.dedup.get(['team-a', 'completion', 'tx-1']), entry, 'reads back')
  t.equal(store.usage.findDuplicate('team-a', 'completion', 'tx-1', 1000, entry.at + 999), entry.id, 'and dedups within its window')
  t.equal(store.usage.findDuplicate('team-a', 'completion', 'tx-1', 1000, entry.at + 1000), undefined, 'not after it')
  t.not(store.usage.dedup.getBinary(['team-a', 'completion', 'tx-odd'])?.[0], 0xc1, 'another shape stays in msgpack')
  t.same(store.usage.dedup.get(['team-a', 'completion', 'tx-odd']), odd)
  await store.close()
})

t.test('a data directory of usage layout 2 (records in msgpack) opens with every record readable', async (t) => {
  const dir = tempDir('meterd-record-layout-v2-')
  t.teardown(() => removeDir(dir))
  const path = join(dir, 'data')
  // What a build of layout 2 wrote: the same databases, records through msgpack with shared structures.
  const old = open({ path, noSubdir: false, maxDbs: 64 })
  const records = old.openDB({ name: 'usage-records', sharedStructuresKey: STRUCTURES })
  const dedup = old.openDB({ name: 'usage-dedup', sharedStructuresKey: STRUCTURES })
  const meta = old.openDB({ name: 'meta' })
  const written = [record('00OLD1'), record('00OLD2', { cost: { currency: 'USD', total: '1', parts: { input: '1' }, source: 'client' } })]
  await old.transaction(() => {
    for (const r of written) {
      records.put(r.id, r)
      dedup.put([r.caller.team, r.kind, r.body.transactionId as string], { id: r.id, at: 1 })
    }
    meta.put('usage.layout', 2)
  })
  t.equal(records.getBinary('00OLD1')?.[0] !== 0xc1, true, 'the old build wrote msgpack')
  await old.close()

  const store = new Store({ path })
  t.equal(store.db('meta').get('usage.layout'), USAGE_LAYOUT, 'the directory is now in the current layout')
  t.equal(USAGE_LAYOUT, 5)
  for (const r of written) t.same(store.usage.get(r.id), r, `${r.id}, written by the old build, reads back`)
  t.equal(store.usage.findDuplicate('team-a', 'completion', 'tx-00OLD1', 3_600_000, 2), '00OLD1', 'its dedup entries are untouched')
  const fresh = record('01NEW')
  await store.durable(store.root.transaction(() => store.usage.records.put(fresh.id, fresh)))
  t.same(
    [...store.usage.records.getRange({})].map(({ value }) => value),
    [...written, fresh],
    'old and new records side by side, in one range read',
  )
  await store.close()
})

t.test('a new process reads records in the fixed layout, the first read loading the shared structures', async (t) => {
  // The first record a process decodes makes msgpack load the database's shared structures
  // (lmdb-js reads them into the buffer the record's bytes are in): the body must survive it.
  const dir = tempDir('meterd-record-layout-fresh-')
  t.teardown(() => removeDir(dir))
  const path = join(dir, 'data')
  const store = new Store({ path })
  const written = [record('01FRESH1', { cost: { currency: 'USD', total: '0', parts: {}, source: 'unpriced', note: 'unknown_model' } }), record('01FRESH2')]
  await store.durable(store.root.transaction(() => written.forEach((r) => store.usage.records.put(r.id, r))))
  await store.close()
  const storeModule = pathToFileURL(join(PACKAGE_ROOT, 'dist', 'src', 'store', 'store.js')).href
  const read = (id: string) =>
    JSON.parse(
      execFileSync(
        process.execPath,
        ['--input-type=module', '-e', `const { Store } = await import(${JSON.stringify(storeModule)}); const s = new Store({ path: ${JSON.stringify(path)} }); process.stdout.write(JSON.stringify(s.usage.get(${JSON.stringify(id)}))); await s.close()`],
        { encoding: 'utf8' },
      ),
    )
  for (const r of written) t.same(read(r.id), r, `${r.id} read by a fresh process (the compiled daemon's Store)`)
})
