/**
 * The daemon's first start on a data directory whose disk cannot take the first admin key (as in
 * cli-disk-full.test.ts, a file-size limit set with `prlimit --fsize` at the data file's size
 * stands for the full file system). Without that key nobody could use the daemon, so it stops,
 * saying why in one line, exit 74 as the CLI's commands do; once there is space it starts and
 * the key works.
 */
import { spawnSync } from 'node:child_process'
import { statSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { meterd, type Ran } from '../helpers/cli.js'
import { ADMIN_KEY, call, removeDir, spawnMeterd, tempDir, writeConfig } from '../helpers/meterd.js'
import { completion } from '../fixtures/wire-examples.js'
import { PACKAGE_ROOT } from '../../src/core/paths.js'

const hasPrlimit = spawnSync('prlimit', ['--version']).status === 0

/** What a user must see: exit 74, one line naming the directory, the cause and what was not done; no stack, no raw lmdb-js report. */
function saysTheKeyWasNotWritten(t: Tap.Test, r: Ran, dir: string): void {
  t.equal(r.code, 74, `exit 74 (stderr: ${r.stderr})`)
  const lines = r.stderr.split('\n').filter(Boolean)
  const last = lines.at(-1) ?? ''
  t.ok(last.startsWith('meterd: '), `one line of meterd's own: ${last}`)
  t.ok(last.includes(`the data directory ${dir}`), 'naming the data directory')
  // A page written past the limit is refused (EFBIG); one written across it is cut short, which LMDB reports as EIO.
  t.match(last, /is full: the file-size limit is reached \(EFBIG\)|: Input\/output error \(is its disk full\?\)/, 'and the cause')
  t.match(last, /MiB free on its file system; the first admin key was not created — .*, then start meterd again$/, 'what was not done and what to do')
  t.notOk(lines.some((l) => /^\s+at /.test(l)), 'no stack trace')
  t.notMatch(r.stderr, /Commit failed|commitError|start failed|node:internal|Node\.js v|code: \d/, "nothing of lmdb-js's or Node's own report")
  // Besides LMDB's own lines (printed by its C code) only log lines below error level: none says the daemon runs on.
  const others = lines.slice(0, -1).filter((l) => !/^(Write error: |mdb_\w+ )/.test(l))
  t.ok(others.every((l) => l.startsWith('{') && JSON.parse(l).level < 50), `no other line: ${JSON.stringify(others)}`)
  t.equal(r.stdout, '', 'no key shown')
}

for (const workers of ['1', '2']) {
  t.test(`the first admin key on a full disk (server.workers: ${workers}): exit 74 with one line; with space the daemon starts and the key works`, { skip: !hasPrlimit && 'prlimit (util-linux) is not installed' }, async (t) => {
    const dir = tempDir('meterd-first-key-full-')
    t.teardown(() => removeDir(dir))
    const data = join(dir, 'data')
    // A data directory without keys (a daemon that ran with bootstrap off); no space written
    // ahead, so the file ends where the data ends.
    const env = { METERD_DATA_DIR: data, METERD_BOOTSTRAP_API_KEY: ADMIN_KEY, METERD_WORKERS: workers }
    const configs = [join(PACKAGE_ROOT, 'config', 'meterd.yaml'), writeConfig(dir, { storage: { preallocate_mb: 0 } })]
    const keyless = await spawnMeterd(t, { dataDir: data, configFiles: [...configs, writeConfig(dir, { extensions: { apikeys: { bootstrap: false } } }, 'keyless.yaml')] })
    t.equal(await keyless.stop('SIGTERM'), 0)
    t.same(JSON.parse((await meterd(['keys', 'list', '--json'], { env })).stdout), [], 'no key yet')
    const full = ['prlimit', `--fsize=${statSync(join(data, 'data.mdb')).size}:unlimited`]

    // Without tap's NODE_OPTIONS (which it adds to every child): its hook writes a file at exit
    // larger than this small data file, and the limit would refuse it.
    const refused = await meterd(['run', ...configs.flatMap((c) => ['--config', c])], { env, prefix: ['env', '-u', 'NODE_OPTIONS', ...full], timeout: 30_000 })
    saysTheKeyWasNotWritten(t, refused, data)
    t.same(JSON.parse((await meterd(['keys', 'list', '--json'], { env })).stdout), [], 'no key was stored')

    const d = await spawnMeterd(t, { dataDir: data, configFiles: configs, env: { METERD_WORKERS: workers }, readyTimeoutMs: 60_000 })
    const stored = await call(`${d.url}/meter/v2/ai/completions`, { key: ADMIN_KEY, body: completion() })
    t.equal(stored.status, 201, `with space, the daemon starts and the key works (${stored.text})`)
    t.equal(await d.stop('SIGTERM'), 0)
  })
}
