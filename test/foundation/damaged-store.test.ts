/**
 * A damaged data file (issue 15 item 3): meterd refuses to open it with one line naming the file
 * and what to do, exit 65, instead of crashing in LMDB (SIGSEGV, SIGBUS) or taking an empty file
 * for a new store; `meterd doctor` checks a directory offline. (doctor's usage, and store files
 * that are not files: store-not-a-file.test.ts.)
 */
import { randomFillSync } from 'node:crypto'
import { cpSync, readFileSync, statSync, truncateSync, writeFileSync, openSync, writeSync, closeSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { meterdOn as meterd } from '../helpers/cli.js'
import { ADMIN_KEY, call, removeDir, spawnMeterd, tempDir } from '../helpers/meterd.js'
import { completion } from '../fixtures/wire-examples.js'

const damages: Record<string, (file: string) => void> = {
  'its first 8 KiB overwritten': (file) => {
    const fd = openSync(file, 'r+')
    writeSync(fd, randomFillSync(Buffer.alloc(8192)), 0, 8192, 0)
    closeSync(fd)
  },
  'random bytes of the same size': (file) => writeFileSync(file, randomFillSync(Buffer.alloc(statSync(file).size))),
  'truncated to a third': (file) => truncateSync(file, Math.floor(statSync(file).size / 3 / 4096) * 4096),
  'zero length': (file) => truncateSync(file, 0),
}

t.test('damaged data files', async (t) => {
  const base = tempDir('meterd-damaged-')
  t.teardown(() => removeDir(base))
  // A store with keys and records, written by a real daemon, without preallocated space (so
  // that the file ends at its data and "a third" cuts into it).
  const healthy = join(base, 'healthy')
  const conf = join(base, 'no-prealloc.yaml')
  writeFileSync(conf, 'storage:\n  preallocate_mb: 0\n')
  const d = await spawnMeterd(t, { dataDir: healthy, configFiles: [join(PACKAGE_ROOT, 'config', 'meterd.yaml'), conf] })
  for (let i = 0; i < 20; i++) {
    const body = Array.from({ length: 100 }, () => completion())
    t.equal((await call(d.url + '/meter/v2/ai/completions', { key: ADMIN_KEY, body })).status, 201)
  }
  t.equal(await d.stop('SIGTERM'), 0)
  t.ok(statSync(join(healthy, 'data.mdb')).size > 200 * 1024, 'the store spans many pages')

  const doctor = await meterd(healthy, 'doctor', '--data-dir', healthy)
  t.equal(doctor.code, 0, 'doctor: a sound store exits 0')
  t.match(doctor.out, /ok: database usage-records: 20\d\d entries/, 'doctor reads every database')
  t.match(doctor.out, /the store is sound/)

  for (const [name, damage] of Object.entries(damages)) {
    t.test(name, async (t) => {
      const dir = join(base, name.replace(/\W+/g, '-'))
      cpSync(healthy, dir, { recursive: true })
      const file = join(dir, 'data.mdb')
      damage(file)
      const before = readFileSync(file)

      const run = await meterd(dir, 'run')
      t.equal(run.signal, null, 'no crash (no SIGSEGV, no SIGBUS)')
      t.equal(run.code, 65, 'meterd run exits 65')
      t.match(run.out, `meterd: the data file ${file} is damaged`, 'one line naming the file')
      t.match(run.out, /Restore the data directory from a backup, or move .*data\.mdb aside/, 'saying what to do')
      t.notMatch(run.out, /\n\s+at /, 'no stack trace')
      t.notMatch(run.out, /first admin key/, 'never taken for a new store')
      t.ok(readFileSync(file).equals(before), 'the file is left as it was')

      const keys = await meterd(dir, 'keys', 'list')
      t.equal(keys.signal, null, 'keys list does not crash either')
      t.equal(keys.code, 65, 'keys list exits 65')
      t.match(keys.out, 'is damaged')

      const check = await meterd(dir, 'doctor', '--data-dir', dir)
      t.equal(check.code, 65, 'doctor exits 65')
      t.match(check.out, `PROBLEM: the data file ${file} is damaged`, 'doctor names the problem')
    })
  }

  t.test('its last tenth cut off: doctor finds it by reading every page', async (t) => {
    const dir = join(base, 'tenth')
    cpSync(healthy, dir, { recursive: true })
    const file = join(dir, 'data.mdb')
    truncateSync(file, Math.floor((statSync(file).size * 0.9) / 4096) * 4096)
    const check = await meterd(dir, 'doctor', '--data-dir', dir)
    t.equal(check.signal, null, 'doctor itself does not crash')
    t.equal(check.code, 65, 'doctor exits 65')
    t.match(check.out, /PROBLEM: .*(cut short|reading the store crashed)/, 'and says the file is damaged')
  })
})
