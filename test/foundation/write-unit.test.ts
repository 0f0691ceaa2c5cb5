import t from 'tap'
import { Store } from '../../src/store/store.js'
import type { ExportConfigurations } from '../../src/extensions/exportconfigs/index.js'
import { ADMIN_KEY, call, removeDir, startMeterd, tempDir } from '../helpers/meterd.js'
import { api, startReceiver } from '../helpers/webhook-receiver.js'
import { createTool, event, startPricing, toolBody } from '../helpers/pricing.js'

function openStore(t: { teardown(fn: () => unknown): void }): Store {
  const dir = tempDir('meterd-unit-')
  const store = new Store({ path: dir })
  t.teardown(async () => {
    await store.close()
    removeDir(dir)
  })
  return store
}

t.test('a write unit runs its steps in order, in one transaction, once, for every caller', async (t) => {
  const store = openStore(t)
  const db = store.db<string, number>('unit-test')
  const unit = store.unit()
  const seen: string[] = []
  unit.add(() => {
    seen.push('pricing')
    db.put('cost', 42)
  })
  unit.add(() => {
    // A later step reads what an earlier one wrote in the same transaction.
    seen.push(`record sees cost ${db.get('cost')}`)
    db.put('record', 1)
  })
  const [a, b] = [unit.commit(), unit.commit()]
  t.equal(a, b, 'every component awaits the same commit')
  await a
  t.same(seen, ['pricing', 'record sees cost 42'], 'steps ran once, in the order added')
  t.equal(db.get('record'), 1)
  t.throws(() => unit.add(() => {}), /added after its unit was committed/, 'a late step is refused, not silently dropped')
})

t.test('a step that throws fails the unit for every caller and skips the steps after it', async (t) => {
  const store = openStore(t)
  const db = store.db<string, number>('unit-test')
  const unit = store.unit()
  unit.add(() => {
    throw new Error('tool aggregates are corrupt')
  })
  unit.add(() => void db.put('record', 1))
  await t.rejects(unit.commit(), /tool aggregates are corrupt/)
  await t.rejects(unit.commit(), /tool aggregates are corrupt/, 'a second caller sees the same failure')
  t.equal(db.get('record'), undefined, 'the record step never ran')
  // Other units in the same lmdb-js transaction are not affected.
  const ok = store.unit()
  ok.add(() => void db.put('other', 2))
  await ok.commit()
  t.equal(db.get('other'), 2)
})

t.test('units committed together share a transaction; one that throws fails alone; a later one gets its own', async (t) => {
  const store = openStore(t)
  const db = store.db<string, number>('unit-test')
  const units = [0, 1, 2].map((i) => {
    const unit = store.unit()
    unit.add(() => {
      if (i === 1) throw new Error('unit 1 is refused')
      db.put(`record ${i}`, i)
    })
    return unit
  })
  // All three are committed before lmdb-js runs any transaction callback.
  const outcomes = units.map((u) => u.commit().then(() => 'stored', (err: Error) => err.message))
  t.same(await Promise.all(outcomes), ['stored', 'unit 1 is refused', 'stored'], 'each unit gets its own outcome')
  t.same([db.get('record 0'), db.get('record 1'), db.get('record 2')], [0, undefined, 2])
  t.same(units.map((u) => u.committed), [true, false, true])
  // A unit committed once the earlier ones ran is written too (by a transaction of its own).
  const late = store.unit()
  late.add(() => void db.put('late', 3))
  await late.commit()
  t.equal(db.get('late'), 3)
  t.equal(late.committed, true)
})

t.test('a unit says it is committed only once its commit is durable, and never after a failure', async (t) => {
  // Ingest skips its own wait for the commit when the unit says so (the lmdb exporter waited):
  // saying so early would answer 201 before the records are on disk.
  const store = openStore(t)
  const db = store.db<string, number>('unit-test')
  const unit = store.unit()
  unit.add(() => void db.put('record', 1))
  t.equal(unit.committed, false, 'not before commit()')
  const done = unit.commit()
  t.equal(unit.committed, false, 'not while the transaction is queued')
  // When the transaction has committed but is not yet flushed, the unit is not committed.
  let atCommit: boolean | undefined
  void store.root.committed.then(() => void (atCommit = unit.committed))
  await done
  t.equal(atCommit, false, 'not when LMDB committed but before the flush')
  t.equal(unit.committed, true, 'once commit() resolved')
  t.equal(db.get('record'), 1)

  const failing = store.unit()
  failing.add(() => {
    throw new Error('no')
  })
  await t.rejects(failing.commit(), /no/)
  t.equal(failing.committed, false, 'a failed unit is never committed')
})

t.test('a write is acknowledged once its own batch is on disk, not held for the writes queued after it', async (t) => {
  const store = openStore(t)
  const db = store.db<string, number>('unit-test')
  const ours = store.root.transaction(() => void db.put('ours', 1))
  // The moment ours commits, another request queues a write whose transaction is slow (a
  // large batch, a slow disk). Ours is already committed and being flushed: it must not
  // wait for that next transaction too.
  let slowDone = false
  const slow = ours.then(() =>
    store.root.transaction(() => {
      const until = Date.now() + 300
      while (Date.now() < until); // holds the next transaction open for 300 ms
      db.put('slow', 1)
    }).then(() => void (slowDone = true)),
  )
  const started = Date.now()
  await store.durable(ours)
  t.notOk(slowDone, 'acknowledged before the later transaction committed')
  t.ok(Date.now() - started < 250, `acknowledged in ${Date.now() - started} ms, without the later transaction's 300 ms`)
  t.equal(db.get('ours'), 1)
  await slow
  t.equal(db.get('slow'), 1)
})

t.test('a tool event: its webhook event carries the cost its aggregate gave it', async (t) => {
  // The default pipeline (pricing → lmdb, webhook), without rate limiting.
  const m = await startMeterd(t, {
    config: {
      extensions: { apikeys: { bootstrap_key: ADMIN_KEY }, exportconfigs: { allow_private_destinations: ['127.0.0.1'], poll_interval_ms: 3_600_000 } },
      service: { extensions: ['apikeys', 'exportconfigs', 'tools'] },
    },
  })
  const engine = m.service.getExtension<ExportConfigurations>('exportconfigs')!.engine!
  const rx = await startReceiver(t)
  const key = await m.key({ team: 'team-a' })
  t.equal((await call(api(m), { key, body: { name: 'tools', url: rx.url, eventTypes: ['usage.tool'] } })).status, 201)
  await createTool(m, key, toolBody('geo', { name: 'requests', aggregationType: 'COUNT', unitPrice: '0.25' }))
  for (let i = 0; i < 3; i++) t.equal((await call(`${m.url}/meter/v2/tool/events`, { key, body: event('geo') })).status, 201)
  await engine.settle()
  const got = await rx.waitFor(3)
  t.same(
    got.map((d) => d.json.data.cost?.total),
    ['0.25', '0.25', '0.25'],
    'each delivered event is priced (the webhook step ran after the pricing step)',
  )
})

t.test('pricing with no durable exporter: the unit still commits, aggregates move, the debug exporter logs the costs', async (t) => {
  const m = await startPricing(t, {
    config: {
      exporters: { debug: { verbosity: 'detailed' } },
      service: {
        extensions: ['apikeys', 'tools'],
        pipelines: { usage: { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'], exporters: ['debug'] } },
      },
    },
  })
  const key = await m.key()
  const tiers = [{ upTo: 1, unitPrice: '1' }, { upTo: null, unitPrice: '0.5' }]
  await createTool(m, key, toolBody('geo', { name: 'requests', aggregationType: 'COUNT', tiersMode: 'graduated', tiers }))
  const bodies = [event('geo'), event('geo')]
  for (const body of bodies) t.equal((await call(`${m.url}/meter/v2/tool/events`, { key, body })).status, 201)
  const logged = m.logs
    .map((l) => JSON.parse(l))
    .filter((l) => l.msg === 'debug exporter')
    .map((l) => [l.item.body.transactionId, l.item.cost?.total])
  t.same(logged, bodies.map((b, i) => [b.transactionId, ['1', '0.5'][i]]), 'the second event saw the aggregate the first one committed')
})
