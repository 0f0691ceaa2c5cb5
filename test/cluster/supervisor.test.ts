/**
 * A daemon with two workers whose supervisor is slow, then gone (issue 19 §1). The workers ask
 * the supervisor for their share of each account's rate limit once a second; a request that
 * needs a new share waits for it. While the supervisor is stopped (SIGSTOP, as a machine too
 * busy to run it would) the request must wait and then be stored, not fail; when the
 * supervisor dies, the request must fail at once with a 503 that says the rate limit could not be
 * decided, not that the record could not be stored.
 */
import { Agent, request } from 'node:http'
import t from 'tap'
import { completion } from '../fixtures/wire-examples.js'
import { ADMIN_KEY, removeDir, spawnMeterd, tempDir, until, signal, workerPids, alive } from '../helpers/meterd.js'

const C = '/meter/v2/ai/completions'

interface Answer {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: any
  ms: number
}

/** A POST on `agent`'s one kept-alive connection, so it reaches the worker that took it. */
function post(agent: Agent, base: string, body: unknown): Promise<Answer> {
  const t0 = Date.now()
  return new Promise((resolve, reject) => {
    const req = request(new URL(C, base), { agent, method: 'POST', headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' } }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c) => chunks.push(c))
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8')
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text ? JSON.parse(text) : undefined, ms: Date.now() - t0 })
      })
    })
    req.on('error', reject)
    req.setTimeout(30_000, () => req.destroy(new Error('timed out')))
    req.end(JSON.stringify(body))
  })
}



const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
/** Into the next second: the worker's share of the last one is no use there, so it must ask. */
const nextSecond = () => sleep(1000 - (Date.now() % 1000) + 50)

t.test('a slow supervisor is waited for; one that dies fails the waiting request at once, naming the rate limit', async (t) => {
  const dir = tempDir('meterd-supervisor-')
  t.teardown(() => removeDir(dir))
  const d = await spawnMeterd(t, { dataDir: `${dir}/data`, env: { METERD_WORKERS: '2', METERD_LOG_LEVEL: 'info' }, readyTimeoutMs: 60_000 })
  await until('every worker to be ready', async () => (d.stdout.join('').includes('every worker is ready') ? true : undefined), 60_000)
  const supervisor = d.proc.pid!
  const workers = workerPids(d)
  t.equal(workers.length, 2, 'two workers')
  t.teardown(() => {
    signal(supervisor, 'SIGCONT')
    for (const p of workers) signal(p, 'SIGKILL')
  })
  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  t.teardown(() => agent.destroy())

  const first = await post(agent, d.url, completion())
  t.equal(first.status, 201, 'stored while the supervisor runs')

  // Stopped for longer than the 2 s a worker used to wait for its share.
  signal(supervisor, 'SIGSTOP')
  await nextSecond()
  const waiting = post(agent, d.url, completion())
  await sleep(3000)
  signal(supervisor, 'SIGCONT')
  const slow = await waiting
  t.equal(slow.status, 201, `stored once the supervisor answered (${JSON.stringify(slow.body)})`)
  t.ok(slow.ms >= 2500, `the request waited for it (${slow.ms} ms)`)

  signal(supervisor, 'SIGSTOP')
  await nextSecond()
  const orphaned = post(agent, d.url, completion())
  await sleep(500)
  signal(supervisor, 'SIGKILL')
  const lost = await orphaned
  t.equal(lost.status, 503, 'refused')
  t.equal(lost.body?.error?.code, 'rate_limiter_unavailable', 'the code names the rate limiter')
  t.match(lost.body?.error?.message, /rate limit of the metering bucket could not be decided/, 'so does the message')
  t.equal(lost.headers['retry-after'], '1', 'with Retry-After')
  t.ok(lost.ms < 2000, `at once, not after a timeout (${lost.ms} ms)`)
  // The workers, without a supervisor, drain and exit.
  await until('the workers to exit', async () => (workers.every((p) => !alive(p)) ? true : undefined), 15_000)
  t.match(d.stdout.join(''), /"signal":"disconnect","msg":"draining"/, 'after draining')
})

