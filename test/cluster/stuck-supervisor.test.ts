/**
 * A supervisor alive but stuck (here stopped with SIGSTOP): its channel stays open, so only a
 * bound tells a worker it will not answer. Requests that need a rate-limit lease must then answer
 * 503 `rate_limiter_unavailable` with Retry-After instead of waiting forever, and the worker's
 * /healthz must fail so that a liveness probe restarts the daemon. When the supervisor answers
 * again, both recover, and the limit still holds for the machine. Everything here goes over
 * connections opened before the stop: node:cluster's primary hands out new ones, so while it is
 * stopped a new connection waits (docs/deployment.md).
 */
import { request as httpRequest } from 'node:http'
import t from 'tap'
import { Client } from 'undici'
import { completion } from '../fixtures/wire-examples.js'
import { ADMIN_KEY, removeDir, signal, spawnMeterd, tempDir, until, workerPids, writeConfig } from '../helpers/meterd.js'

const C = '/meter/v2/ai/completions'
const BOUND_S = 3 // server.supervisor_timeout_seconds (10 by default)

interface Answer {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: any
}

/** One request on the client's keep-alive connection; a request left unanswered fails after 15 s (a hang). */
async function call(client: Client, method: 'GET' | 'POST', path: string, body?: unknown): Promise<Answer> {
  const res = await client.request({
    method,
    path,
    headers: { 'x-api-key': ADMIN_KEY, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
    headersTimeout: 15_000,
  })
  const text = await res.body.text()
  return { status: res.statusCode, headers: res.headers, body: text ? JSON.parse(text) : undefined }
}

/** One POST on a connection of its own (the cluster hands each to the workers in turn). */
function post(base: string, body: unknown): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(new URL(C, base), { agent: false, method: 'POST', headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' } }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: JSON.parse(Buffer.concat(chunks).toString('utf8')) }))
    })
    req.on('error', reject)
    req.setTimeout(15_000, () => req.destroy(new Error('timed out')))
    req.end(JSON.stringify(body))
  })
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

t.test('a stopped supervisor: 503 rate_limiter_unavailable and a failing /healthz after the bound, then both recover', async (t) => {
  const dir = tempDir('meterd-stuck-')
  t.teardown(() => removeDir(dir))
  const cfg = writeConfig(dir, {
    server: { supervisor_timeout_seconds: BOUND_S },
    extensions: { ratelimit: { backend: 'memory', limits: { metering: 20, analytics: 100, platform: 100 } } },
  })
  const d = await spawnMeterd(t, {
    dataDir: `${dir}/data`,
    configFiles: [new URL('../../config/meterd.yaml', import.meta.url).pathname, cfg],
    env: { METERD_WORKERS: '2', METERD_LOG_LEVEL: 'info' }, // info: the supervisor's "every worker is ready"
    readyTimeoutMs: 60_000,
  })
  await until('every worker to be ready', async () => (d.stdout.join('').includes('every worker is ready') ? true : undefined), 60_000)
  t.equal(workerPids(d).length, 2, 'two worker processes')
  const supervisor = d.proc.pid!
  // No stopped process may outlive the test (spawnMeterd's teardown also SIGKILLs it).
  t.teardown(() => signal(supervisor, 'SIGCONT'))

  const client = new Client(d.url, { pipelining: 1, keepAliveTimeout: 60_000 })
  t.teardown(() => client.destroy())
  t.equal((await call(client, 'POST', C, completion({ transactionId: 'stuck-0' }))).status, 201, 'stored before the stop')
  t.equal((await call(client, 'GET', '/healthz')).status, 200, '/healthz ok before the stop')

  signal(supervisor, 'SIGSTOP')
  const stoppedAt = Date.now()
  // Past this second: the worker's lease of it may still admit without asking.
  await sleep(1100)
  const t0 = Date.now()
  const refused = await call(client, 'POST', C, completion({ transactionId: 'stuck-1' }))
  const waited = Date.now() - t0
  t.equal(refused.status, 503, `a request that needs a lease is refused (${refused.status}), not left waiting`)
  t.equal(refused.body?.error?.code, 'rate_limiter_unavailable', 'with the rate limiter\'s code')
  t.equal(refused.headers['retry-after'], '1', 'and Retry-After')
  t.ok(waited >= BOUND_S * 1000 - 100 && waited < BOUND_S * 1000 + 3000, `after the bound of ${BOUND_S} s (${waited} ms)`)

  const unhealthy = await until(
    '/healthz to fail',
    async () => {
      const h = await call(client, 'GET', '/healthz')
      return h.status === 200 ? undefined : h
    },
    (BOUND_S + 4) * 1000,
  )
  const silentMs = Date.now() - stoppedAt
  t.equal(unhealthy.status, 503, `/healthz answers 503 ${silentMs} ms after the stop`)
  t.ok(silentMs >= BOUND_S * 1000 - 100, 'not before the bound')
  t.equal(unhealthy.body.status, 'supervisor_unresponsive', 'saying why')
  t.match(unhealthy.body.reason, /supervisor/)
  t.ok(Math.abs(Date.parse(unhealthy.body.since) - stoppedAt) < 2000, `since about the stop (${unhealthy.body.since})`)

  signal(supervisor, 'SIGCONT')
  const stored = await until(
    'a request to be admitted again',
    async () => {
      const r = await call(client, 'POST', C, completion({ transactionId: 'stuck-2' }))
      return r.status === 201 ? r : undefined
    },
    10_000,
  )
  t.equal(stored.status, 201, 'admitted and stored again once the supervisor answers')
  await until('/healthz to be ok', async () => ((await call(client, 'GET', '/healthz')).status === 200 ? true : undefined), 5000)
  t.pass('/healthz ok again')

  // The leases counted for requests given up on did not leave anything broken or over-admitting:
  // a burst in one second, across both workers, still gets exactly the limit.
  while (Date.now() % 1000 > 50) await sleep(5)
  const burst = await Promise.all(Array.from({ length: 40 }, (_, i) => post(d.url, completion({ transactionId: `after-${i}` }))))
  t.equal(new Set(burst.map((a) => a.headers['x-ratelimit-reset'])).size, 1, 'one window')
  // A lease that takes longer than the bound (a machine loaded far past its cores) is given up on
  // with a 503 while the supervisor has counted it: such a request is refused, never admitted twice.
  const count = (status: number) => burst.filter((a) => a.status === status).length
  const unavailable = burst.filter((a) => a.status === 503 && (a.body as { error?: { code?: string } })?.error?.code === 'rate_limiter_unavailable').length
  t.equal(count(201) + unavailable, 20, `exactly the limit is admitted across both workers (${count(201)} admitted, ${unavailable} given up on after the bound)`)
  t.equal(count(429), 20, 'the rest is refused')
  t.equal(await d.stop('SIGTERM'), 0, 'SIGTERM drains both workers and exits 0')
})
