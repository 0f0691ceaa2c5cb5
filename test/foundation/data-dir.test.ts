/**
 * What meterd leaves on disk is its owner's only (issue 15 item 9): the data directory 0700,
 * every file in it 0600, whatever the umask; an existing world-readable directory loses that
 * access at start. And an operator-supplied first admin key is never echoed.
 */
import { chmodSync, mkdirSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { makeDirs } from '../../src/store/data-dir.js'
import { meterd } from '../helpers/cli.js'
import { ADMIN_KEY, removeDir, spawnMeterd, startMeterd, tempDir } from '../helpers/meterd.js'

const modeOf = (p: string) => statSync(p).mode & 0o777

t.test('a new data directory is 0700 and every file meterd writes in it 0600, under the usual umask 022', async (t) => {
  const previous = process.umask(0o022)
  t.teardown(() => process.umask(previous))
  const dir = tempDir()
  t.teardown(() => removeDir(dir))
  const dataDir = join(dir, 'nested', 'data')
  const m = await startMeterd(t, { dataDir })
  await m.close()
  t.equal(modeOf(dataDir).toString(8), '700', 'the data directory')
  const files = readdirSync(dataDir)
  t.ok(files.includes('data.mdb') && files.includes('lock.mdb') && files.includes('master.key'), `data.mdb, lock.mdb and master.key are there (${files})`)
  for (const f of files) t.equal(modeOf(join(dataDir, f)).toString(8), '600', f)
})

t.test('an existing world-readable data directory loses world access at start (group access is kept)', async (t) => {
  const dir = tempDir()
  t.teardown(() => removeDir(dir))
  const dataDir = join(dir, 'data')
  const first = await startMeterd(t, { dataDir })
  await first.close()
  // As older versions left it under umask 022.
  chmodSync(dataDir, 0o755)
  chmodSync(join(dataDir, 'data.mdb'), 0o644)
  chmodSync(join(dataDir, 'lock.mdb'), 0o664)
  const m = await startMeterd(t, { dataDir })
  t.equal(modeOf(dataDir).toString(8), '750')
  t.equal(modeOf(join(dataDir, 'data.mdb')).toString(8), '640')
  t.equal(modeOf(join(dataDir, 'lock.mdb')).toString(8), '660')
  t.match(m.logs.join('\n'), /readable by every user/, 'a warning says what was changed')
  t.match(m.logs.join('\n'), /data\.mdb/)
})

t.test('METERD_BOOTSTRAP_API_KEY is never echoed; a generated first key is printed once', async (t) => {
  const supplied = tempDir('meterd-boot-')
  t.teardown(() => removeDir(supplied))
  const d = await spawnMeterd(t, { dataDir: supplied, env: { METERD_LOG_LEVEL: 'info' } })
  const r = await fetch(d.url + '/v2/sdk/resolve-key', { headers: { 'x-api-key': ADMIN_KEY } })
  t.equal(r.status, 200, 'the supplied key is the first admin key')
  await d.stop()
  const out = d.stdout.join('')
  t.notMatch(out, ADMIN_KEY, 'neither stdout nor the log holds the supplied key')
  t.notMatch(out, ADMIN_KEY.slice(12), 'nor a part of it')
  t.match(out, /created the first admin key from the supplied bootstrap key/, 'the log says a first key was made')

  const generated = tempDir('meterd-boot-')
  t.teardown(() => removeDir(generated))
  const g = await spawnMeterd(t, { dataDir: generated, env: { METERD_BOOTSTRAP_API_KEY: '' } })
  await g.stop()
  const printed = g.stdout.join('').match(/hak_default_[A-Za-z0-9]{32}/g) ?? []
  t.equal(new Set(printed).size, 1, 'one generated key is printed, for the operator to keep')
})

t.test('a data directory that cannot be made (under /proc) stops the start with one line, instead of hanging', { skip: process.platform !== 'linux' && 'needs /proc' }, async (t) => {
  // Node's recursive mkdirSync never returns for such a path (mkdir answers ENOENT under a parent that exists).
  const started = Date.now()
  const r = await meterd(['run'], { env: { METERD_DATA_DIR: '/proc/meterd-no-such-dir/data' } })
  t.ok(Date.now() - started < 20_000, 'it returns')
  t.equal(r.code, 78)
  const lines = r.stderr.trim().split('\n')
  t.match(lines[lines.length - 1], /^meterd: cannot open the data directory \/proc\/meterd-no-such-dir\/data \(storage\.path\): a directory cannot be made there .* — point storage\.path \(METERD_DATA_DIR\) at a directory on a disk$/)
  t.notMatch(r.stderr, /\n\s+at /, 'no stack trace')
})

const root = process.getuid?.() === 0
const hasSetpriv = (() => {
  try {
    return statSync('/usr/bin/setpriv').isFile()
  } catch {
    return false
  }
})()

t.test('a data directory whose data.mdb or lock.mdb this user may not open (left by a start as root) stops run, keys and reprice with one line, exit 78', { skip: root && !hasSetpriv && 'root needs setpriv (util-linux) to run as another user' }, async (t) => {
  const dir = tempDir()
  t.teardown(() => removeDir(dir))
  const dataDir = join(dir, 'data')
  const m = await startMeterd(t, { dataDir })
  await m.close()
  // As root the commands run as nobody over root's 0600 files; otherwise the files lose our own access.
  chmodSync(dir, 0o755)
  chmodSync(dataDir, 0o777)
  const prefix = root ? ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', 'env', '-u', 'NODE_OPTIONS'] : ['env', '-u', 'NODE_OPTIONS']
  for (const [file, mode] of [['data.mdb', 0o000], ['lock.mdb', 0o444]] as const) {
    chmodSync(join(dataDir, 'data.mdb'), file === 'data.mdb' ? (root ? 0o600 : mode) : 0o644)
    chmodSync(join(dataDir, 'lock.mdb'), file === 'lock.mdb' ? (root ? 0o644 : mode) : 0o666)
    for (const args of [['run'], ['keys', 'list'], ['reprice', '--dry-run']]) {
      const r = await meterd(args, { env: { METERD_DATA_DIR: dataDir }, prefix, timeout: 30_000 })
      t.equal(r.code, 78, `${file}: meterd ${args.join(' ')} exits 78 (${r.stderr.trim().slice(0, 200)})`)
      t.match(r.stderr, `meterd: cannot open the data directory ${dataDir} (storage.path): permission denied — give the user running meterd read and write access to it`)
      t.notMatch(r.stderr, /\n\s+at |EACCES|Attempting to setup locks/, 'no stack, no raw errno text')
    }
  }
})

t.test('makeDirs makes every missing level owner-only, and leaves what exists', async (t) => {
  const previous = process.umask(0o022)
  t.teardown(() => process.umask(previous))
  const dir = tempDir()
  t.teardown(() => removeDir(dir))
  makeDirs(join(dir, 'a', 'b', 'c'))
  t.same(['a', join('a', 'b'), join('a', 'b', 'c')].map((p) => modeOf(join(dir, p)).toString(8)), ['700', '700', '700'])
  makeDirs(join(dir, 'a', 'b', 'c')) // again: nothing to do, no error
  t.throws(() => makeDirs('/proc/meterd-no-such-dir/x'), { code: 'ENOENT' }, 'an ENOENT is thrown, not looped on')
})
