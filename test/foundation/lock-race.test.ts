/**
 * Starts racing for one data directory: over a pid file left by a dead daemon, exactly one takes
 * it over (the others are refused with exit 75); and pid files meterd cannot use (a directory, a
 * FIFO) are one line and exit 78, never a stack, a crash or a hang.
 */
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, linkSync, lstatSync, mkdirSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { ADMIN_KEY, call, freePort, removeDir, spawnMeterd, tempDir } from '../helpers/meterd.js'

const BIN = join(PACKAGE_ROOT, 'bin', 'meterd.js')
const LOCK = join(PACKAGE_ROOT, 'dist', 'src', 'store', 'lock.js')

/**
 * One process's start, cut down to the daemon's lock (a whole daemon takes a second to load, so
 * starts would not meet), for many rounds: on `go <time>` it waits until then, takes the lock and
 * says `won` or `refused <exit code>`; on `release` the winner lets it go (as at its exit).
 */
const RACER = `
const { acquireDataDirLock } = await import(process.argv[1])
const dir = process.argv[2]
let lock
let buffered = ''
process.stdin.on('data', (d) => {
  buffered += d
  for (let i; (i = buffered.indexOf('\\n')) >= 0; ) {
    const [what, at] = buffered.slice(0, i).split(' ')
    buffered = buffered.slice(i + 1)
    if (what === 'release') {
      lock.release()
      console.log('released')
      continue
    }
    const early = Number(at) - Date.now() - 2
    if (early > 0) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, early)
    while (Date.now() < Number(at));
    try {
      lock = acquireDataDirLock(dir)
      console.log('won')
    } catch (err) {
      console.log('refused ' + (err.exitCode ?? err.message))
    }
  }
})
`

/** The pid of a process that has ended: what a daemon killed by SIGKILL leaves in its pid file. */
function deadPid(): number {
  const child = spawnSync(process.execPath, ['-e', 'console.log(process.pid)'], { encoding: 'utf8' })
  return Number(child.stdout.trim())
}

/** Processes that take the lock of `dir` together, round after round. */
function racers(dir: string, n: number) {
  const procs = Array.from({ length: n }, () => {
    const proc = spawn(process.execPath, ['--input-type=module', '-e', RACER, LOCK, dir], { stdio: ['pipe', 'pipe', 'inherit'] })
    const lines: string[] = []
    const waiting: Array<(line: string) => void> = []
    let buffered = ''
    proc.stdout!.on('data', (d) => {
      buffered += d
      for (let i; (i = buffered.indexOf('\n')) >= 0; buffered = buffered.slice(i + 1)) {
        const line = buffered.slice(0, i)
        const next = waiting.shift()
        if (next) next(line)
        else lines.push(line)
      }
    })
    proc.on('exit', () => waiting.splice(0).forEach((w) => w('exited')))
    const answer = () => (lines.length ? Promise.resolve(lines.shift()!) : new Promise<string>((resolve) => waiting.push(resolve)))
    return { proc, answer }
  })
  return {
    /** Every racer takes the lock at the same moment (when all have loaded): what each said. */
    async round(at: number): Promise<string[]> {
      for (const r of procs) r.proc.stdin!.write(`go ${at}\n`)
      const said = await Promise.all(procs.map((r) => r.answer()))
      // The winner held the lock until everyone had answered; now it lets it go.
      await Promise.all(said.map((s, i) => (s === 'won' ? (procs[i].proc.stdin!.write('release\n'), procs[i].answer()) : undefined)))
      return said
    },
    end: () => Promise.all(procs.map((r) => (r.proc.exitCode !== null ? undefined : new Promise((resolve) => (r.proc.on('exit', resolve), r.proc.stdin!.end()))))),
  }
}

t.test('starts racing over a stale pid file: exactly one takes it over, every other is refused (exit 75)', async (t) => {
  const dir = tempDir('meterd-lock-race-')
  t.teardown(() => removeDir(dir))
  const dead = deadPid()
  const race = racers(dir, 8)
  t.teardown(race.end)
  let first = Date.now() + 2000 // the racers load meanwhile
  let bad = 0
  const rounds = 100
  for (let round = 0; round < rounds; round++, first = Date.now() + 20) {
    writeFileSync(join(dir, 'meterd.pid'), `${dead}\n`)
    const said = await race.round(first)
    const won = said.filter((s) => s === 'won').length
    const refused = said.filter((s) => s === 'refused 75').length
    if (won !== 1 || refused !== said.length - 1) t.fail(`round ${round}: ${said.join(', ')}`, { bad: ++bad })
    else if (existsSync(join(dir, 'meterd.pid'))) t.fail(`round ${round}: the winner let the lock go, and its pid file stayed`, { bad: ++bad })
  }
  t.equal(bad, 0, `${rounds} rounds of 8 starts at once: one winner each, every other refused with 75`)
  await race.end()
  t.same(readdirSync(dir), [], 'no files of the takeover are left behind')
})

t.test('a start killed in the middle of a takeover does not block the next one, and what it left is cleared', async (t) => {
  const dir = tempDir('meterd-lock-crashed-')
  t.teardown(() => removeDir(dir))
  const pidFile = join(dir, 'meterd.pid')
  writeFileSync(pidFile, `${deadPid()}\n`)
  const st = statSync(pidFile, { bigint: true })
  const claimer = deadPid()
  // What a start killed after claiming the stale file, before replacing it, leaves (see takeOver in src/store/lock.ts).
  writeFileSync(join(dir, `meterd.pid.${claimer}.tmp`), `${claimer}\n`)
  linkSync(join(dir, `meterd.pid.${claimer}.tmp`), join(dir, `meterd.pid.takeover-${st.ino}-${st.mtimeNs}-${readFileSync(pidFile, 'utf8').trim()}`))
  const d = await spawnMeterd(t, { dataDir: dir })
  t.equal(readFileSync(pidFile, 'utf8'), `${d.proc.pid}\n`, 'the next start takes the stale file over')
  t.same(
    readdirSync(dir).filter((f) => f.startsWith('meterd.pid')),
    ['meterd.pid'],
    'the dead start’s claim and file are gone',
  )
  await d.stop()
})

t.test('starts racing with no pid file at all: exactly one wins', async (t) => {
  const dir = tempDir('meterd-lock-race-new-')
  t.teardown(() => removeDir(dir))
  const race = racers(dir, 8)
  t.teardown(race.end)
  const said = await race.round(Date.now() + 2000)
  t.equal(said.filter((s) => s === 'won').length, 1, said.join(', '))
  t.equal(said.filter((s) => s === 'refused 75').length, 7)
})

/** `meterd run` on `dataDir` to its end (it is expected to refuse to start): exit code and output. */
async function runToExit(dataDir: string): Promise<{ code: number | null; output: string }> {
  const port = await freePort()
  const proc = spawn(process.execPath, [BIN, 'run'], {
    env: { ...process.env, METERD_DATA_DIR: dataDir, METERD_ENDPOINT: `127.0.0.1:${port}`, METERD_OTLP_GRPC_ENDPOINT: '', METERD_OTLP_HTTP_ENDPOINT: '', METERD_WORKERS: '1', METERD_BOOTSTRAP_API_KEY: ADMIN_KEY, METERD_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  proc.stdout.on('data', (d) => (output += d))
  proc.stderr.on('data', (d) => (output += d))
  // Only a guard against a start that hangs (a FIFO read for ever): a start that refuses took
  // over 15 s to get that far on a loaded machine (2 s of CPU to load the daemon), and was killed.
  const timer = setTimeout(() => proc.kill('SIGKILL'), 60_000)
  const code = await new Promise<number | null>((resolve) => proc.on('exit', (c, sig) => resolve(c ?? (sig ? -1 : null))))
  clearTimeout(timer)
  return { code, output }
}

t.test('a pid file that is a directory: one line naming it and exit 78; the directory is left alone', async (t) => {
  const dir = tempDir('meterd-lock-dir-')
  t.teardown(() => removeDir(dir))
  mkdirSync(join(dir, 'meterd.pid'))
  const r = await runToExit(dir)
  t.equal(r.code, 78, r.output)
  t.match(r.output, `meterd: the pid file ${join(dir, 'meterd.pid')} is a directory`)
  t.equal(r.output.trim().split('\n').length, 1, 'one line')
  t.notMatch(r.output, /\n\s+at /, 'no stack trace')
  t.ok(lstatSync(join(dir, 'meterd.pid')).isDirectory(), 'meterd removes nothing it did not write')
})

t.test('a pid file that is a FIFO: one line and exit 78, not a start hung reading it', { skip: process.platform === 'win32' && 'mkfifo' }, async (t) => {
  const dir = tempDir('meterd-lock-fifo-')
  t.teardown(() => removeDir(dir))
  spawnSync('mkfifo', [join(dir, 'meterd.pid')])
  const r = await runToExit(dir)
  t.equal(r.code, 78, r.output)
  t.match(r.output, `the pid file ${join(dir, 'meterd.pid')} is a FIFO`)
})

t.test('a pid file that is empty, garbage or a symbolic link is no daemon’s: the start takes it over', async (t) => {
  const dir = tempDir('meterd-lock-odd-')
  t.teardown(() => removeDir(dir))
  const pidFile = join(dir, 'meterd.pid')
  const elsewhere = join(dir, 'elsewhere')
  writeFileSync(elsewhere, 'not a pid')
  const cases: Array<[string, () => void]> = [
    ['empty (a power cut after it was created)', () => writeFileSync(pidFile, '')],
    ['garbage', () => writeFileSync(pidFile, 'hello\n')],
    ['a symbolic link', () => symlinkSync(elsewhere, pidFile)],
  ]
  for (const [what, make] of cases) {
    make()
    const d = await spawnMeterd(t, { dataDir: dir })
    t.equal((await call(d.url + '/readyz')).status, 200, `${what}: the daemon starts`)
    t.ok(lstatSync(pidFile).isFile(), `${what}: its pid file is a file again`)
    t.equal(readFileSync(pidFile, 'utf8'), `${d.proc.pid}\n`, `${what}: holding its pid`)
    t.equal(await d.stop(), 0)
    t.notOk(existsSync(pidFile), `${what}: removed at the stop`)
  }
  t.equal(readFileSync(elsewhere, 'utf8'), 'not a pid', 'the symbolic link’s target was not written')

  // meterd doctor reads the pid file as the start does: a FIFO there is named, not read for ever.
  spawnSync('mkfifo', [pidFile])
  const doctor = spawnSync(process.execPath, [BIN, 'doctor', '--data-dir', dir], { encoding: 'utf8', timeout: 30_000 })
  t.equal(doctor.status, 0, 'doctor ends: the store is sound')
  t.match(doctor.stdout, `note: the pid file ${pidFile} is a FIFO, not a file meterd wrote`)
})
