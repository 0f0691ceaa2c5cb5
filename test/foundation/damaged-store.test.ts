/**
 * A damaged data file (issue 15 item 3): meterd refuses to open it with one line naming the file
 * and what to do, exit 65, instead of crashing in LMDB (SIGSEGV, SIGBUS) or taking an empty file
 * for a new store; `meterd doctor` checks a directory offline.
 */
import { spawnSync } from 'node:child_process'
import { randomFillSync } from 'node:crypto'
import { cpSync, mkdirSync, readFileSync, statSync, truncateSync, writeFileSync, openSync, writeSync, closeSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { ADMIN_KEY, call, freePort, removeDir, spawnMeterd, tempDir } from '../helpers/meterd.js'
import { completion } from '../fixtures/wire-examples.js'

const BIN = join(PACKAGE_ROOT, 'bin', 'meterd.js')

/** Runs `meterd ARGS` on `dataDir` to its end. */
async function meterd(dataDir: string, ...args: string[]) {
  const port = await freePort()
  const r = spawnSync(process.execPath, [BIN, ...args], {
    encoding: 'utf8',
    timeout: 60_000, // a guard against a hang: loading the daemon is 2 s of CPU, over 20 s on a loaded machine
    env: { ...process.env, METERD_DATA_DIR: dataDir, METERD_ENDPOINT: `127.0.0.1:${port}`, METERD_OTLP_GRPC_ENDPOINT: '127.0.0.1:0', METERD_OTLP_HTTP_ENDPOINT: '127.0.0.1:0', METERD_LOG_LEVEL: 'warn' },
  })
  return { code: r.status, signal: r.signal, out: r.stdout + r.stderr }
}

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

t.test('doctor: --help, a missing directory, a directory without a store', async (t) => {
  const base = tempDir('meterd-doctor-')
  t.teardown(() => removeDir(base))
  const help = await meterd(base, 'doctor', '--help')
  t.equal(help.code, 0)
  t.match(help.out, /usage: meterd doctor \[--data-dir DIR\]/)
  t.match(help.out, /Exit status: 0 the store is sound; 65/)
  const missing = await meterd(base, 'doctor', '--data-dir', join(base, 'nope'))
  t.equal(missing.code, 65)
  t.match(missing.out, /does not exist/)
  const empty = await meterd(base, 'doctor', '--data-dir', base)
  t.equal(empty.code, 65)
  t.match(empty.out, /holds no store/)
  const bad = await meterd(base, 'doctor', '--frobnicate')
  t.equal(bad.code, 64, 'an unknown flag is a usage error')
})

t.test('data.mdb or lock.mdb that is a directory or a FIFO: run and keys say which, exit 78, instead of a crash (SIGSEGV), a bare EISDIR or a hang', async (t) => {
  const base = tempDir('meterd-not-a-file-')
  t.teardown(() => removeDir(base))
  for (const name of ['data.mdb', 'lock.mdb']) {
    for (const kind of ['directory', 'FIFO']) {
      const dir = join(base, `${name}-${kind}`)
      mkdirSync(dir)
      if (kind === 'directory') mkdirSync(join(dir, name))
      else spawnSync('mkfifo', [join(dir, name)])
      // --init: keys commands otherwise refuse a directory without data.mdb before looking further.
      for (const args of [['run'], ['keys', 'create', '--team', 'team-a', '--scopes', 'admin', '--init']]) {
        const r = await meterd(dir, ...args)
        t.equal(r.code, 78, `${name} a ${kind}, ${args.join(' ')}: exit 78 (${r.signal ?? r.out})`)
        t.match(r.out, `the store file ${join(dir, name)} is a ${kind}, not a file LMDB can open`)
        t.notMatch(r.out, /\n\s+at /, 'no stack trace')
      }
    }
  }
})
