/**
 * Where `meterd backup` will not write: it never overwrites, never writes into the data directory,
 * and a copy the disk does not take leaves nothing behind. (The backup of a running daemon:
 * backup.test.ts; the sources it refuses, and one without master.key: backup-source.test.ts.)
 */
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { meterd, meterdOn } from '../helpers/cli.js'
import { removeDir, tempDir } from '../helpers/meterd.js'

const hasPrlimit = spawnSync('prlimit', ['--version']).status === 0

t.test('backup: the targets it refuses', async (t) => {
  const base = tempDir('meterd-backup-refusals-')
  t.teardown(() => removeDir(base))
  // A store made by `keys create --init`.
  const store = join(base, 'store')
  t.equal((await meterdOn(store, 'keys', 'create', '--team', 'team-a', '--scopes', 'admin', '--init')).code, 0)
  const partials = () => readdirSync(base).filter((f) => f.includes('.partial-'))

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

  t.test('a copy the file system does not take (a file-size limit, as a full disk): exit 74, nothing left behind', { skip: !hasPrlimit && 'prlimit (util-linux) is not installed' }, async (t) => {
    const to = join(base, 'too-big')
    const r = await meterd(['backup', '--data-dir', store, '--to', to], { prefix: ['prlimit', '--fsize=20000:unlimited'] })
    t.equal(r.code, 74, 'exit 74, not killed by SIGXFSZ')
    t.match(r.stderr, `meterd: cannot write the backup in ${base}:`)
    t.match(r.stderr, `MiB free on its file system); nothing was written to ${to}`)
    t.notOk(existsSync(to), 'no backup')
    t.same(partials(), [], 'and no partial copy')
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
