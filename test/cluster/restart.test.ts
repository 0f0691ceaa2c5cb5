/**
 * A worker that dies while the connections of the daemon wait in the supervisor for a worker to
 * take them (node:cluster's round-robin queue: every worker busy, here stopped with SIGSTOP).
 * Those connections belong to no worker: they must be served once a worker is free, not closed,
 * and the supervisor must not fall over handing them out. Only the one connection handed to
 * the dead worker fails, at once. (What a killed supervisor leaves behind: peer-dir.test.ts.)
 */
import { request } from 'node:http'
import t from 'tap'
import { completion } from '../fixtures/wire-examples.js'
import { ADMIN_KEY, removeDir, spawnMeterd, tempDir, until, signal, workerPids } from '../helpers/meterd.js'

const C = '/meter/v2/ai/completions'

/** One POST on a connection of its own: when it is connected, and its status or the error's message. */
function post(base: string, path: string, body: unknown): { connected: Promise<void>; answer: Promise<number | string> } {
  let connected!: () => void
  const onConnect = new Promise<void>((r) => (connected = r))
  const answer = new Promise<number | string>((resolve) => {
    const req = request(new URL(path, base), { agent: false, method: 'POST', headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' } }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode ?? 0))
    })
    req.on('socket', (s) => s.once('connect', connected))
    req.on('error', (err) => {
      connected()
      resolve(err.message)
    })
    req.setTimeout(30_000, () => req.destroy(new Error('timed out')))
    req.end(JSON.stringify(body))
  })
  return { connected: onConnect, answer }
}

t.test('a worker dies while connections wait for a free worker: they are served, and the daemon stays up', async (t) => {
  const dir = tempDir('meterd-restart-')
  t.teardown(() => removeDir(dir))
  const d = await spawnMeterd(t, { dataDir: `${dir}/data`, env: { METERD_WORKERS: '2', METERD_LOG_LEVEL: 'info' }, readyTimeoutMs: 60_000 })
  await until('every worker to be ready', async () => (d.stdout.join('').includes('every worker is ready') ? true : undefined), 60_000)
  const [victim, survivor] = workerPids(d)
  const stopped = [victim, survivor]
  t.teardown(() => stopped.forEach((p) => signal(p, 'SIGCONT')))

  // No worker takes a connection: each is handed at most one, the rest wait in the supervisor.
  signal(victim, 'SIGSTOP')
  signal(survivor, 'SIGSTOP')
  const requests = Array.from({ length: 20 }, (_, i) => post(d.url, C, completion({ transactionId: `waiting-${i}` })))
  await Promise.all(requests.map((r) => r.connected))
  signal(victim, 'SIGKILL')
  // Its replacement is stopped as soon as it exists, long before it could listen.
  const replacement = await until('a replacement worker', async () => workerPids(d).find((p) => p !== victim && p !== survivor), 30_000)
  signal(replacement, 'SIGSTOP')
  stopped.push(replacement)
  // The workers stay busy a while (a long GC pause, a slow disk): the connections keep waiting.
  await new Promise((r) => setTimeout(r, 2500))
  signal(survivor, 'SIGCONT')
  signal(replacement, 'SIGCONT')

  const got = await Promise.all(requests.map((r) => r.answer))
  const failed = got.filter((a) => a !== 201)
  t.ok(failed.length <= 1, `every connection but the one handed to the killed worker is answered 201 (got ${JSON.stringify(got)})`)
  t.ok(failed.every((f) => f !== 'timed out'), 'none is left hanging')
  t.equal(d.proc.exitCode, null, 'the supervisor is running')
  t.equal(d.proc.signalCode, null)
  await until('two workers', async () => (workerPids(d).length === 2 ? true : undefined), 30_000)
  const again = await post(d.url, C, completion({ transactionId: 'after' })).answer
  t.equal(again, 201, 'and the daemon still answers')
  t.equal(await d.stop('SIGTERM'), 0, 'SIGTERM drains both workers and exits 0')
})
