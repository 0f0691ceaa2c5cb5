/** One daemon per data directory (issue 15 item 4); `meterd keys` still works beside it. */
import { execFile, spawn } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { ADMIN_KEY, call, freePort, removeDir, spawnMeterd, tempDir } from '../helpers/meterd.js'
import { completion } from '../fixtures/wire-examples.js'

const run = promisify(execFile)
const BIN = join(PACKAGE_ROOT, 'bin', 'meterd.js')
const C = '/meter/v2/ai/completions'

/** `meterd run` on `dataDir` to its end (it is expected to refuse to start): exit code and output. */
async function runToExit(dataDir: string): Promise<{ code: number | null; output: string }> {
  const port = await freePort()
  const proc = spawn(process.execPath, [BIN, 'run'], {
    env: { ...process.env, METERD_DATA_DIR: dataDir, METERD_ENDPOINT: `127.0.0.1:${port}`, METERD_OTLP_GRPC_ENDPOINT: '127.0.0.1:0', METERD_OTLP_HTTP_ENDPOINT: '127.0.0.1:0', METERD_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  proc.stdout.on('data', (d) => (output += d))
  proc.stderr.on('data', (d) => (output += d))
  // Only a guard against a start that hangs: loading the daemon is 2 s of CPU, over 15 s on a loaded machine.
  const timer = setTimeout(() => proc.kill('SIGKILL'), 60_000)
  const code = await new Promise<number | null>((resolve) => proc.on('exit', (c) => resolve(c)))
  clearTimeout(timer)
  return { code, output }
}

t.test('a second daemon on the same data directory is refused; the first keeps serving, and keys commands work beside it', async (t) => {
  const dataDir = tempDir('meterd-lock-')
  t.teardown(() => removeDir(dataDir))
  // With two workers: the primary holds the lock, and its workers (same directory) must not take it.
  const first = await spawnMeterd(t, { dataDir, env: { METERD_WORKERS: '2' } })
  t.equal(readFileSync(join(dataDir, 'meterd.pid'), 'utf8').trim(), String(first.proc.pid), 'the lock file holds the daemon’s (primary’s) pid')

  const second = await runToExit(dataDir)
  t.equal(second.code, 75, 'the second exits 75 (EX_TEMPFAIL)')
  t.match(second.output, new RegExp(`data directory ${dataDir} is in use by another meterd \\(pid ${first.proc.pid}`), 'one line naming the directory and the other daemon')
  t.notMatch(second.output, /\n\s+at /, 'no stack trace')
  t.notMatch(second.output, /first admin key/, 'nothing was written to the store')

  t.equal((await call(first.url + '/readyz')).status, 200, 'the first is still ready')
  t.equal((await call(first.url + C, { key: ADMIN_KEY, body: completion() })).status, 201, 'and stores records')

  const created = JSON.parse(
    (await run(process.execPath, [BIN, 'keys', 'create', '--team', 'team-l', '--scopes', 'metering:write', '--json'], { env: { ...process.env, METERD_DATA_DIR: dataDir } })).stdout,
  )
  t.equal((await call(first.url + C, { key: created.key, body: completion() })).status, 201, 'a key created beside the running daemon works in it')
  const listed = JSON.parse((await run(process.execPath, [BIN, 'keys', 'list', '--json'], { env: { ...process.env, METERD_DATA_DIR: dataDir } })).stdout)
  t.ok(listed.some((k: { id: string }) => k.id === created.id), 'keys list works beside it')
  t.ok(existsSync(join(dataDir, 'meterd.pid')), 'keys commands leave the daemon’s lock alone')
  const doctor = await run(process.execPath, [BIN, 'doctor', '--data-dir', dataDir]).catch((err) => err)
  t.equal(doctor.code ?? 0, 0, 'meterd doctor checks the directory beside the running daemon')
  t.match(doctor.stdout, `names pid ${first.proc.pid}: a daemon is running on this directory`)
  t.match(doctor.stdout, /the store is sound/)

  t.equal(await first.stop('SIGTERM'), 0)
  t.notOk(existsSync(join(dataDir, 'meterd.pid')), 'a clean stop removes the lock file')
})

t.test('the lock of a daemon that was killed does not block the next start', async (t) => {
  const dataDir = tempDir('meterd-lock-stale-')
  t.teardown(() => removeDir(dataDir))
  const first = await spawnMeterd(t, { dataDir })
  await first.stop('SIGKILL')
  t.equal(readFileSync(join(dataDir, 'meterd.pid'), 'utf8').trim(), String(first.proc.pid), 'the killed daemon left its lock file')
  const second = await spawnMeterd(t, { dataDir })
  t.equal((await call(second.url + '/readyz')).status, 200, 'the next daemon starts')
  t.equal(readFileSync(join(dataDir, 'meterd.pid'), 'utf8').trim(), String(second.proc.pid), 'and holds the lock')
  await second.stop()
})

for (const workers of ['1', '2']) {
  t.test(`SIGHUP (a closed terminal, kill -HUP) drains the daemon like SIGTERM (server.workers ${workers}): exit 0, the lock file is gone`, async (t) => {
    const dataDir = tempDir('meterd-lock-hup-')
    t.teardown(() => removeDir(dataDir))
    const d = await spawnMeterd(t, { dataDir, env: { METERD_WORKERS: workers } })
    t.equal((await call(d.url + C, { key: ADMIN_KEY, body: completion() })).status, 201, 'it serves')
    t.equal(await d.stop('SIGHUP'), 0, 'exit 0, not death by the signal')
    t.notOk(existsSync(join(dataDir, 'meterd.pid')), 'the lock file is removed')
  })
}

t.test('a stale meterd.pid whose pid another program now has (a reboot, a new container) does not block the start; a live meterd still does', { skip: process.platform !== 'linux' && 'reads /proc' }, async (t) => {
  const dataDir = tempDir('meterd-lock-reused-')
  t.teardown(() => removeDir(dataDir))
  const other = spawn('sleep', ['60'], { stdio: 'ignore' })
  t.teardown(() => other.kill('SIGKILL'))
  const { writeFileSync } = await import('node:fs')
  writeFileSync(join(dataDir, 'meterd.pid'), `${other.pid}\n`)
  const d = await spawnMeterd(t, { dataDir })
  t.equal(readFileSync(join(dataDir, 'meterd.pid'), 'utf8').trim(), String(d.proc.pid), 'the file of a pid that is not a meterd is taken over')
  const second = await runToExit(dataDir)
  t.equal(second.code, 75, 'a second meterd is still refused')
  t.match(second.output, `in use by another meterd (pid ${d.proc.pid}`)
  await d.stop()
})
