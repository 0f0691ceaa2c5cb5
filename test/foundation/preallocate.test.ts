import t from 'tap'
import { spawnSync } from 'node:child_process'
import { statSync } from 'node:fs'
import { join } from 'node:path'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { Store, type StoreOptions } from '../../src/store/store.js'
import { completion } from '../fixtures/wire-examples.js'
import { ADMIN_KEY, call, removeDir, startMeterd, tempDir } from '../helpers/meterd.js'

const MiB = 1024 * 1024

function openStore(t: { teardown(fn: () => unknown): void }, opts: Omit<StoreOptions, 'path'> = {}): { store: Store; dir: string } {
  const dir = tempDir('meterd-prealloc-')
  const store = new Store({ path: dir, ...opts })
  t.teardown(async () => {
    await store.close()
    removeDir(dir)
  })
  return { store, dir }
}

/** A value of `bytes` whose content depends on `i`, so a page zeroed by mistake cannot pass for it. */
function value(i: number, bytes: number): string {
  const unit = `record ${i} `
  return unit.repeat(Math.ceil(bytes / unit.length)).slice(0, bytes)
}

t.test('the data file is kept written ahead of the data while it grows, and every value survives', async (t) => {
  const { store, dir } = openStore(t, { preallocateMb: 1 })
  await store.preallocate()
  t.ok(store.preallocated() >= MiB / 2, `space is written ahead at once (${store.preallocated()} bytes)`)

  // About 8 MiB of values: the file outgrows what was written ahead several times over, and
  // top-ups started alongside the writes append their zeros while LMDB commits and extends the file.
  const db = store.db<number, string>('prealloc-test')
  const sizes = [300, 3000, 9000, 40_000]
  const writes: Promise<unknown>[] = []
  for (let i = 0; i < 600; i++) {
    const unit = store.unit()
    unit.add(() => void db.put(i, value(i, sizes[i % sizes.length])))
    writes.push(unit.commit())
    if (i % 25 === 0) writes.push(store.preallocate())
  }
  await Promise.all(writes)
  await store.preallocate()
  const ahead = store.preallocated()
  t.ok(ahead >= MiB / 2 && ahead <= MiB, `after growing, between half and all of 1 MiB is written ahead (${ahead} bytes)`)
  t.ok(statSync(join(dir, 'data.mdb')).size > 8 * MiB, 'the file grew past several top-ups')

  let wrong = 0
  for (let i = 0; i < 600; i++) if (db.get(i) !== value(i, sizes[i % sizes.length])) wrong++
  t.equal(wrong, 0, 'every value reads back as written')

  // And from disk, in a fresh environment.
  await store.close()
  const again = new Store({ path: dir })
  const db2 = again.db<number, string>('prealloc-test')
  wrong = 0
  for (let i = 0; i < 600; i++) if (db2.get(i) !== value(i, sizes[i % sizes.length])) wrong++
  t.equal(wrong, 0, 'every value reads back after the environment is reopened')
  const unit = again.unit()
  unit.add(() => void db2.put(600, 'after reopen'))
  await unit.commit()
  t.equal(db2.get(600), 'after reopen', 'and the reopened file takes new writes in the space written ahead')
  await again.close()
})

t.test('writes alone keep the space topped up: LMDB never has to grow the file itself', async (t) => {
  const { store, dir } = openStore(t, { preallocateMb: 1 })
  await store.preallocate()
  const first = statSync(join(dir, 'data.mdb')).size
  const db = store.db<number, string>('prealloc-test')
  // About 2 MiB of values over about 1.5 s: twice what was written ahead at the start.
  let lowest = Infinity
  for (let i = 0; i < 50; i++) {
    const unit = store.unit()
    unit.add(() => void db.put(i, value(i, 40_000)))
    await unit.commit()
    lowest = Math.min(lowest, store.preallocated())
    await new Promise((r) => setTimeout(r, 30))
  }
  t.ok(statSync(join(dir, 'data.mdb')).size >= first + MiB, 'the space was topped up as the data grew')
  t.ok(lowest > 0, `after every commit some space was still written ahead (at least ${lowest} bytes)`)
})

t.test('without preallocation nothing is written past the data', async (t) => {
  const { store } = openStore(t)
  const db = store.db<number, string>('prealloc-test')
  for (let i = 0; i < 50; i++) await db.put(i, value(i, 5000))
  await store.preallocate()
  t.equal(store.preallocated(), 0, 'the file ends at LMDB\'s last page')
})

t.test('the file never grows past the map size for the space written ahead', async (t) => {
  const { store, dir } = openStore(t, { maxSizeMb: 16, preallocateMb: 64 })
  await store.preallocate()
  t.equal(statSync(join(dir, 'data.mdb')).size, 16 * MiB, 'stops at the 16 MiB map: LMDB could not use more')
})

t.test('when the space cannot be written (file size limit), the store says so and keeps storing in what it wrote', async (t) => {
  // A real write failure: the child runs under `ulimit -f` (2 MiB), below the 8 MiB it is asked
  // to write ahead. Node ignores SIGXFSZ, so the write fails with EFBIG instead of killing it. (The
  // test runner's hooks, which it injects into every child, catch that signal and re-raise it
  // when theirs is the only listener; the child adds one of its own.)
  const dir = tempDir('meterd-prealloc-limit-')
  t.teardown(() => removeDir(dir))
  const script = `
    import { statSync } from 'node:fs'
    import { Store } from ${JSON.stringify(join(PACKAGE_ROOT, 'dist', 'src', 'store', 'store.js'))}
    process.on('SIGXFSZ', () => {})
    const errors = []
    const store = new Store({ path: ${JSON.stringify(dir)}, preallocateMb: 8, onPreallocateError: (err) => errors.push(err.code) })
    await store.preallocate()
    const ahead = store.preallocated()
    const size = statSync(${JSON.stringify(join(dir, 'data.mdb'))}).size
    const db = store.db('limit-test')
    for (let i = 0; i < 20; i++) { const unit = store.unit(); unit.add(() => void db.put(i, 'value ' + i)); await unit.commit() }
    let back = 0
    for (let i = 0; i < 20; i++) if (db.get(i) === 'value ' + i) back++
    await store.close()
    console.log(JSON.stringify({ errors, ahead, size, back }))
  `
  const r = spawnSync('bash', ['-c', `ulimit -f 2048 && exec "${process.execPath}" --input-type=module -e "$0"`, script], { encoding: 'utf8', timeout: 30_000 })
  t.equal(r.status, 0, 'the process carries on', { signal: r.signal, stderr: r.stderr })
  const out = JSON.parse(r.stdout.trim().split('\n').at(-1) ?? '{}')
  t.same(out.errors, ['EFBIG'], 'the failure is reported once (then it waits a minute before trying again)')
  // The part it wrote stays: another writer may have written past it meanwhile, so it is not cut.
  t.ok(out.ahead > 0 && out.size <= 2 * MiB, `the part it wrote, up to the limit, is kept (${out.ahead} bytes ahead, file ${out.size} bytes)`)
  t.equal(out.back, 20, 'records are still stored and read back')
})

t.test('the daemon writes storage.preallocate_mb ahead (8 MiB by default) and stores records in it', async (t) => {
  const m = await startMeterd(t)
  await m.service.store.preallocate()
  const ahead = m.service.store.preallocated()
  t.ok(ahead >= 4 * MiB && ahead <= 8 * MiB, `between 4 and 8 MiB ahead (${ahead} bytes)`)
  const res = await call(`${m.url}/meter/v2/ai/completions`, { key: ADMIN_KEY, body: completion() })
  t.equal(res.status, 201, 'the record is stored')
  const back = await call(`${m.url}/profitstream/v2/api/sources/metrics/ai/completions?size=5`, { key: ADMIN_KEY })
  t.equal(back.status, 200, 'the list answers')
  t.equal(back.body._embedded.aICompletionMetricResourceList.length, 1, 'the record reads back')

  const off = await startMeterd(t, { config: { storage: { preallocate_mb: 0 } } })
  t.equal(off.service.store.preallocated(), 0, 'preallocate_mb: 0 writes nothing ahead')
})
