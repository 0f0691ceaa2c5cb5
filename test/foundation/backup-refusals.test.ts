/**
 * What `meterd backup` refuses, and a store without master.key (its master key comes from the
 * config): the backup never overwrites, never copies a store that is missing or damaged, and
 * says what the operator must keep besides the copy. (The backup of a running daemon: backup.test.ts.)
 */
import { cpSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, writeFileSync, writeSync, closeSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { meterdOn } from '../helpers/cli.js'
import { removeDir, tempDir } from '../helpers/meterd.js'

t.test('backup refusals, and a store without master.key', async (t) => {
  const base = tempDir('meterd-backup-refusals-')
  t.teardown(() => removeDir(base))
  // A store made by `keys create --init`: no daemon ever ran on it, so it has no master.key.
  const store = join(base, 'store')
  t.equal((await meterdOn(store, 'keys', 'create', '--team', 'team-a', '--scopes', 'admin', '--init')).code, 0)
  t.notOk(existsSync(join(store, 'master.key')))
  const partials = () => readdirSync(base).filter((f) => f.includes('.partial-'))

  t.test('no master.key in the source: none in the backup, and the output says where the key must come from', async (t) => {
    const to = join(base, 'without-key')
    // Without --data-dir: storage.path of the config (METERD_DATA_DIR), as doctor and keys find it.
    const r = await meterdOn(store, 'backup', '--to', to)
    t.equal(r.code, 0, 'exit 0')
    t.match(r.out, /data\.mdb +\d+ bytes, 0 usage records/)
    t.match(r.out, `master.key  none in ${store}, so none in the backup`)
    t.match(r.out, /exportconfigs\.master_key \(METERD_MASTER_KEY\); keep that value with this backup/)
    t.same(readdirSync(to), ['data.mdb'], 'the backup holds data.mdb alone')
  })

  t.test('an existing directory that is not empty, or a file, is never overwritten (exit 73)', async (t) => {
    const full = join(base, 'full')
    mkdirSync(full)
    writeFileSync(join(full, 'keep.txt'), 'mine')
    const r = await meterdOn(store, 'backup', '--data-dir', store, '--to', full)
    t.equal(r.code, 73)
    t.match(r.out, `meterd: ${full} exists and is not empty; the backup goes to a new (or empty) directory and never overwrites. Nothing was written`)
    t.same(readdirSync(full), ['keep.txt'], 'nothing was added')
    t.equal(readFileSync(join(full, 'keep.txt'), 'utf8'), 'mine', 'nothing was changed')
    const file = join(base, 'a-file')
    writeFileSync(file, 'mine')
    const f = await meterdOn(store, 'backup', '--data-dir', store, '--to', file)
    t.equal(f.code, 73)
    t.match(f.out, `${file} exists and is not a directory`)
    t.equal(readFileSync(file, 'utf8'), 'mine')
    t.same(partials(), [], 'no partial copy was left')

    // An empty directory (made ahead, e.g. as a mount point) is used.
    const empty = join(base, 'empty')
    mkdirSync(empty)
    const e = await meterdOn(store, 'backup', '--data-dir', store, '--to', empty)
    t.equal(e.code, 0, 'exit 0')
    t.same(readdirSync(empty), ['data.mdb'])
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

  t.test('bad usage: no --to, or a --to inside the data directory (exit 64)', async (t) => {
    const noTo = await meterdOn(store, 'backup', '--data-dir', store)
    t.equal(noTo.code, 64)
    t.match(noTo.out, 'meterd: backup needs --to DIR')
    const inside = await meterdOn(store, 'backup', '--data-dir', store, '--to', join(store, 'copy'))
    t.equal(inside.code, 64)
    t.match(inside.out, `is inside the data directory ${store}`)
    t.notOk(existsSync(join(store, 'copy')))
  })
})
