/**
 * The data directories `meterd backup` copies and refuses: one without master.key (its master
 * key comes from the config: the output says to keep that), and one missing, without a store or
 * damaged (exit 65, as doctor says). (The backup of a running daemon: backup.test.ts; the
 * targets it refuses: backup-refusals.test.ts.)
 */
import { closeSync, cpSync, existsSync, mkdirSync, openSync, readdirSync, writeSync } from 'node:fs'
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
})
