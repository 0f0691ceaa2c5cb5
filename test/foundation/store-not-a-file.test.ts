/**
 * `meterd doctor`'s usage and what it says of a directory without a store; and data.mdb or
 * lock.mdb that is a directory or a FIFO: `meterd run` and `keys` name it and exit 78. (Split from
 * damaged-store.test.ts: its thirty runs of the CLI, 2 s of CPU each, outlasted tap's 120 s for
 * one file on a loaded machine.)
 */
import { spawnSync } from 'node:child_process'
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { meterdOn as meterd } from '../helpers/cli.js'
import { removeDir, tempDir } from '../helpers/meterd.js'

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
