/**
 * The data directories `meterd backup` copies and refuses: one without master.key (its master
 * key comes from the config: the output says to keep that), and one missing, without a store or
 * damaged, in its header pages or further in (exit 65, as doctor says). (The backup of a running daemon: backup.test.ts; the
 * targets it refuses: backup-refusals.test.ts.)
 */
import { randomFillSync } from 'node:crypto'
import { closeSync, cpSync, existsSync, mkdirSync, openSync, readFileSync, readdirSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { meterdOn } from '../helpers/cli.js'
import { removeDir, tempDir } from '../helpers/meterd.js'

t.test('backup: the source directory', async (t) => {
  const base = tempDir('meterd-backup-source-')
  t.teardown(() => removeDir(base))
  // A store made by `keys create --init`: no daemon ever ran on it, so it has no master.key.
  const store = join(base, 'store')
  t.equal((await meterdOn(store, 'keys', 'create', '--team', 'team-a', '--scopes', 'admin', '--init')).code, 0)
  t.notOk(existsSync(join(store, 'master.key')))
  const partials = () => readdirSync(base).filter((f) => f.includes('.partial-'))

  t.test('no master.key in the source: none in the backup, and the output says where the key must come from', async (t) => {
    const to = join(base, 'without-key')
    // Without --data-dir: storage.path of the config (METERD_DATA_DIR), as doctor and keys find it.
    const files = readdirSync(store).sort()
    const r = await meterdOn(store, 'backup', '--to', to)
    t.equal(r.code, 0, 'exit 0')
    t.same(readdirSync(store).sort(), files, 'nothing was added to the data directory (no daemon runs on it)')
    t.match(r.out, /data\.mdb +\d+ bytes, 0 usage records/)
    t.match(r.out, `master.key  none in ${store}, so none in the backup`)
    t.match(r.out, /exportconfigs\.master_key \(METERD_MASTER_KEY\); keep that value with this backup/)
    t.same(readdirSync(to), ['data.mdb'], 'the backup holds data.mdb alone')
  })

  t.test('a missing, storeless or damaged source is refused with exit 65, and nothing is written', async (t) => {
    const to = join(base, 'never')
    const missing = await meterdOn(store, 'backup', '--data-dir', join(base, 'nope'), '--to', to)
    t.equal(missing.code, 65)
    t.match(missing.out, `meterd: the data directory ${join(base, 'nope')} does not exist`)
    const storeless = join(base, 'storeless')
    mkdirSync(storeless)
    const none = await meterdOn(store, 'backup', '--data-dir', storeless, '--to', to)
    t.equal(none.code, 65)
    t.match(none.out, `${storeless} holds no store (no data.mdb)`)
    const damaged = join(base, 'damaged')
    cpSync(store, damaged, { recursive: true })
    const fd = openSync(join(damaged, 'data.mdb'), 'r+')
    writeSync(fd, Buffer.alloc(8192, 7), 0, 8192, 0)
    closeSync(fd)
    const bad = await meterdOn(store, 'backup', '--data-dir', damaged, '--to', to)
    t.equal(bad.signal, null, 'no crash')
    t.equal(bad.code, 65)
    t.match(bad.out, `meterd: the data file ${join(damaged, 'data.mdb')} is damaged`)
    t.notMatch(bad.out, /\n\s+at /, 'no stack trace')
    t.notOk(existsSync(to), 'no backup was written')
    t.same(partials(), [], 'no partial copy was left')
  })
  t.test('a source damaged past its header pages: the copy is read through and refused (exit 65), plain or compacted', async (t) => {
    const damaged = join(base, 'damaged-inside')
    cpSync(store, damaged, { recursive: true })
    const file = join(damaged, 'data.mdb')
    // Every page but the two header pages and the main tree's root (which the header check
    // reads): the databases' own pages, as a bad disk block would leave them.
    const data = readFileSync(file)
    const PAGE = 4096
    const newer = data.readBigUInt64LE(PAGE + 24 + 128) > data.readBigUInt64LE(24 + 128) ? PAGE : 0
    const mainRoot = Number(data.readBigUInt64LE(newer + 24 + 112))
    const fd = openSync(file, 'r+')
    for (let page = 2; page < data.length / PAGE; page++) if (page !== mainRoot) writeSync(fd, randomFillSync(Buffer.alloc(PAGE)), 0, PAGE, page * PAGE)
    closeSync(fd)
    t.equal((await meterdOn(store, 'doctor', '--data-dir', damaged)).code, 65, 'doctor finds it damaged')
    for (const flags of [[], ['--compact']]) {
      const to = join(base, 'never-inside')
      const r = await meterdOn(store, 'backup', '--data-dir', damaged, '--to', to, ...flags)
      t.equal(r.signal, null, `${flags.join(' ') || 'plain'}: no crash`)
      t.equal(r.code, 65, 'exit 65')
      t.match(r.out, `meterd: the data file of ${damaged} is damaged: `)
      t.match(r.out, `Check it with meterd doctor --data-dir ${damaged}`)
      t.notMatch(r.out, /\n\s+at /, 'no stack trace')
      t.notOk(existsSync(to), 'no backup was written')
      t.same(partials(), [], 'no partial copy was left')
    }
  })
})
