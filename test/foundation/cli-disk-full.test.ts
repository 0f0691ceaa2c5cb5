/**
 * The commands that write to the data directory (`keys`, `reprice`) on a full disk (as test/foundation/disk-full.test.ts, a file-size limit set
 * with `prlimit --fsize` stands for the full file system: past it the kernel refuses LMDB's
 * writes, EFBIG instead of ENOSPC). The limit is the data file's size, and what the command
 * writes is larger than the whole file, so its commit must grow the file whatever pages LMDB
 * has free: it cannot fit.
 */
import { spawnSync } from 'node:child_process'
import { existsSync, statSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { meterd, type Ran } from '../helpers/cli.js'
import { call, removeDir, startMeterd, tempDir, writeConfig } from '../helpers/meterd.js'
import { completion } from '../fixtures/wire-examples.js'

const hasPrlimit = spawnSync('prlimit', ['--version']).status === 0
/** A key's note larger than the data file of a store holding a few keys. */
const BIG_NAME = 'n'.repeat(100_000)

/** What a user must see: exit 74, one line naming the directory, no stack trace, nothing on stdout. */
function saysTheDiskIsFull(t: Tap.Test, r: Ran, dir: string, unwritten: RegExp): void {
  t.equal(r.code, 74, `exit 74 (stderr: ${r.stderr})`)
  t.equal(r.stdout, '', 'nothing on stdout (no key shown, no count)')
  const lines = r.stderr.split('\n').filter(Boolean)
  const last = lines.at(-1) ?? ''
  t.ok(last.startsWith(`meterd: the data directory ${dir} is full: `), `one line names the data directory and says it is full: ${last}`)
  t.match(last, /EFBIG/, 'and why')
  t.match(last, unwritten, 'and what was not done')
  t.notOk(lines.some((l) => /^\s+at /.test(l)), 'no stack trace')
  t.notMatch(r.stderr, /Commit failed|commitError|node:internal|Node\.js v/, "nothing of lmdb-js's or Node's own report")
  // LMDB's own lines ("Write error: …", "mdb_page_spill error 27"), printed by its C code, are all there may be besides.
  t.ok(lines.slice(0, -1).every((l) => /^(Write error: |mdb_\w+ )/.test(l)), `no other line: ${JSON.stringify(lines.slice(0, -1))}`)
}

t.test('keys create and keys revoke on a full disk: exit 74 with one line, and nothing is changed', { skip: !hasPrlimit && 'prlimit (util-linux) is not installed' }, async (t) => {
  const dir = tempDir('meterd-cli-full-')
  t.teardown(() => removeDir(dir))
  const data = join(dir, 'data')
  const env = { METERD_DATA_DIR: data }
  const first = await meterd(['keys', 'create', '--team', 't', '--scopes', 'admin', '--init', '--json'], { env })
  t.equal(first.code, 0, first.stderr)
  const big = await meterd(['keys', 'create', '--team', 't', '--scopes', 'admin', '--name', BIG_NAME, '--json'], { env })
  t.equal(big.code, 0, big.stderr)
  const bigId = JSON.parse(big.stdout).id as string
  const full = ['prlimit', `--fsize=${statSync(join(data, 'data.mdb')).size}:unlimited`]

  const created = await meterd(['keys', 'create', '--team', 't', '--scopes', 'admin', '--name', BIG_NAME], { env, prefix: full })
  saysTheDiskIsFull(t, created, data, /no key was created/)
  // Rewriting the big key's record takes new pages too (LMDB copies it on write).
  const revoked = await meterd(['keys', 'revoke', bigId], { env, prefix: full })
  saysTheDiskIsFull(t, revoked, data, /the key was not revoked/)

  const list = await meterd(['keys', 'list', '--json'], { env })
  t.equal(list.code, 0, list.stderr)
  const keys = JSON.parse(list.stdout) as { id: string; revoked?: string }[]
  t.equal(keys.length, 2, 'no key was added')
  t.notOk(keys.find((k) => k.id === bigId)?.revoked, 'the key is not revoked')

  // With the space back, the same commands work.
  t.equal((await meterd(['keys', 'create', '--team', 't', '--scopes', 'admin', '--name', BIG_NAME], { env })).code, 0, 'created once there is space')
  t.equal((await meterd(['keys', 'revoke', bigId], { env })).code, 0, 'revoked once there is space')
})

t.test('reprice on a full disk: exit 74 with one line, and the record stays as it was', { skip: !hasPrlimit && 'prlimit (util-linux) is not installed' }, async (t) => {
  const dir = tempDir('meterd-reprice-full-')
  t.teardown(() => removeDir(dir))
  const data = join(dir, 'data')
  // No space written ahead of the data: the file ends where the data ends.
  const m = await startMeterd(t, { dataDir: data, config: { storage: { preallocate_mb: 0 } } })
  const key = await m.key()
  // An unknown model (stored unpriced) in a record larger than the store: repricing rewrites it.
  const stored = await call(`${m.url}/meter/v2/ai/completions`, { key, body: completion({ provider: 'Acme', model: 'acme-1', notes: BIG_NAME }) })
  t.equal(stored.status, 201, stored.text)
  await m.close()
  const cfg = writeConfig(dir, {
    storage: { path: data },
    processors: { pricing: { models: [{ provider: 'acme', model: 'acme-1', effective: '2020-01-01', input: 1, output: 1 }] } },
  })
  const full = ['prlimit', `--fsize=${statSync(join(data, 'data.mdb')).size}:unlimited`]

  const refused = await meterd(['reprice', '--config', cfg], { prefix: full })
  saysTheDiskIsFull(t, refused, data, /the rest was not repriced/)
  const dry = await meterd(['reprice', '--config', cfg, '--dry-run', '--json'])
  t.match(JSON.parse(dry.stdout), { examined: 1, priced: 1 }, 'the record is still unpriced')
  const priced = await meterd(['reprice', '--config', cfg, '--json'])
  t.match(JSON.parse(priced.stdout), { examined: 1, priced: 1 }, 'and is priced once there is space')
})

/** A 1 MiB tmpfs (root only): a real file system with no space, where LMDB's memory-mapped lock file faults. */
function tinyTmpfs(t: Tap.Test): string | undefined {
  if (process.getuid?.() !== 0) return undefined
  const mnt = tempDir('meterd-tmpfs-')
  if (spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', mnt]).status !== 0) {
    removeDir(mnt)
    return undefined
  }
  t.teardown(() => {
    spawnSync('umount', [mnt])
    removeDir(mnt)
  })
  return mnt
}

t.test('a new store on a file system with a few KiB left: keys create --init and run exit 74 with one line, never SIGSEGV, and leave no empty data.mdb', async (t) => {
  const mnt = tinyTmpfs(t)
  if (!mnt) return t.skip('needs root and mount -t tmpfs')
  // All but 8 KiB taken: lock.mdb (8 KiB, written through a memory map) cannot get its pages.
  spawnSync('dd', ['if=/dev/zero', `of=${join(mnt, 'fill')}`, 'bs=1k', 'count=1016'])
  for (const args of [['keys', 'create', '--team', 't', '--scopes', 'admin', '--init'], ['run']]) {
    const dir = join(mnt, args[0])
    const r = await meterd(args, { env: { METERD_DATA_DIR: dir, METERD_BOOTSTRAP_API_KEY: 'k'.repeat(40) }, timeout: 30_000 })
    t.equal(r.code, 74, `meterd ${args[0]}: exit 74, not killed by a signal (stderr: ${r.stderr})`)
    t.match(r.stderr, new RegExp(`${dir}.*(is full|the disk is full): no space is left on its disk \\(ENOSPC\\)`))
    t.notMatch(r.stderr, /\n\s+at /, 'no stack')
    t.notOk(existsSync(join(dir, 'data.mdb')), 'no empty data.mdb is left to be refused as damaged at the next start')
  }
})

t.test('a data directory on a read-only file system: keys list and reprice exit 78 with one line, as run does', async (t) => {
  const mnt = tinyTmpfs(t)
  if (!mnt) return t.skip('needs root and mount -t tmpfs')
  const dir = join(mnt, 'data')
  const env = { METERD_DATA_DIR: dir }
  t.equal((await meterd(['keys', 'create', '--init', '--team', 't', '--scopes', 'admin'], { env })).code, 0, 'a store is made')
  t.equal(spawnSync('mount', ['-o', 'remount,ro', mnt]).status, 0, 'the file system is made read-only')
  for (const args of [['keys', 'list'], ['reprice', '--dry-run'], ['run']]) {
    const r = await meterd(args, { env: { ...env, METERD_BOOTSTRAP_API_KEY: 'k'.repeat(40) }, timeout: 30_000 })
    t.equal(r.code, 78, `meterd ${args.join(' ')}: exit 78 (stderr: ${r.stderr})`)
    t.match(r.stderr, `meterd: cannot open the data directory ${dir} (storage.path): the file system is read-only`)
    t.notMatch(r.stderr, /Attempting to setup locks|\n\s+at /, "no lmdb-js text, no stack")
  }
})
