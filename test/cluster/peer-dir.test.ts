/**
 * The directory of the workers' sockets (server.workers > 1) goes with the supervisor that made
 * it; one a kill -9 left behind is removed by the next daemon. (A file of its own: it starts three
 * daemons of two workers, which on a busy machine took longer than tap allows one file together
 * with restart.test.ts.)
 */
import { mkdirSync, readdirSync } from 'node:fs'
import t from 'tap'
import { removeDir, spawnMeterd, tempDir, until, workerPids, alive } from '../helpers/meterd.js'

t.test("the workers' socket directory goes with the supervisor; one a kill -9 left is removed by the next daemon", async (t) => {
  const dir = tempDir('meterd-peerdir-')
  t.teardown(() => removeDir(dir))
  // The daemons' own temporary directory: what they leave is visible here, and only theirs.
  const tmp = `${dir}/tmp`
  mkdirSync(tmp)
  const socketDirs = () => readdirSync(tmp).filter((f) => f.startsWith('meterd-workers-'))
  const start = async (name: string) => {
    const d = await spawnMeterd(t, { dataDir: `${dir}/${name}`, env: { METERD_WORKERS: '2', METERD_LOG_LEVEL: 'info', TMPDIR: tmp }, readyTimeoutMs: 60_000 })
    await until('every worker to be ready', async () => (d.stdout.join('').includes('every worker is ready') ? true : undefined), 60_000)
    return d
  }

  const first = await start('one')
  const [own] = socketDirs()
  t.match(own, new RegExp(`^meterd-workers-${first.proc.pid}-`), 'named after the supervisor')
  t.same(readdirSync(`${tmp}/${own}`).sort(), ['0.sock', '1.sock'], 'a socket per worker')
  const workers = workerPids(first)
  await first.stop('SIGKILL')
  // Its workers drain and exit on their own once the supervisor is gone.
  await until('the orphaned workers to exit', async () => (workers.every((p) => !alive(p)) ? true : undefined), 30_000)
  t.same(socketDirs(), [own], 'kill -9 leaves the directory behind')

  const second = await start('two')
  const now = socketDirs()
  t.equal(now.length, 1)
  t.notOk(now.includes(own), 'the next daemon removed the one left behind')
  t.equal(await second.stop('SIGTERM'), 0)
  t.same(socketDirs(), [], 'a supervisor that exits removes its own')
})

