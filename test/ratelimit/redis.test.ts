/**
 * The redis backend against a real redis-server started here (.ci/run installs it): replicas
 * sharing one Redis admit together exactly an account's limit per window; error-pattern
 * blocks are shared; an unreachable Redis follows fail_open.
 */
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { join } from 'node:path'
import { ADMIN_KEY, call, freePort, removeDir, spawnMeterd, startMeterd, tempDir, writeConfig, type ChildMeterd, type Res } from '../helpers/meterd.js'
import { completion } from '../fixtures/wire-examples.js'
import { DEFAULT_CONFIG_PATH } from '../../src/core/config/load.js'
import { haveRedis, startRedis as startRedisServer } from '../helpers/redis-server.js'

const COMPLETIONS = '/meter/v2/ai/completions'
const T0 = 1_800_000_000_000

interface RedisServer {
  url: string
  port: number
  stop(): Promise<void>
}

async function startRedis(t: Test, port?: number): Promise<RedisServer> {
  const server = await startRedisServer(port)
  t.teardown(server.stop)
  return server
}

const redisConfig = (url: string, extra: Record<string, unknown> = {}) => ({
  extensions: { ratelimit: { backend: 'redis', redis: { url }, ...extra } },
})

if (!haveRedis) {
  t.skip('redis-server is not installed (apt-get install redis-server); the redis backend tests need a real one')
} else {
  t.test('three meterd processes sharing one Redis admit together exactly the account limit per window', async (t) => {
    const redis = await startRedis(t)
    const LIMIT = 25
    const dir = tempDir()
    t.teardown(() => removeDir(dir))
    // Each child's first admin key (ADMIN_KEY) belongs to the account `default`.
    const configFile = writeConfig(dir, redisConfig(redis.url, { accounts: { default: { metering: LIMIT } } }))
    const replicas: ChildMeterd[] = []
    for (let i = 0; i < 3; i++) replicas.push(await spawnMeterd(t, { dataDir: join(dir, `data-${i}`), configFiles: [DEFAULT_CONFIG_PATH, configFile] }))
    const keys = replicas.map(() => ADMIN_KEY)

    // Start near the beginning of a second, then keep every replica busy for about 3.5 windows.
    await new Promise((r) => setTimeout(r, 1000 - (Date.now() % 1000) + 5))
    const stopAt = Date.now() + 3500
    const results: Res[] = []
    await Promise.all(
      replicas.flatMap((m, i) =>
        Array.from({ length: 4 }, async () => {
          while (Date.now() < stopAt) results.push(await call(m.url + COMPLETIONS, { key: keys[i], body: completion() }))
        }),
      ),
    )
    const perWindow = new Map<string, { admitted: number; limited: number; replicas: Set<string> }>()
    for (const r of results) {
      const w = r.headers.get('x-ratelimit-reset')!
      const e = perWindow.get(w) ?? { admitted: 0, limited: 0, replicas: new Set() }
      if (r.status === 201) e.admitted++
      else if (r.status === 429) e.limited++
      else t.fail(`unexpected status ${r.status}`, { body: r.body })
      perWindow.set(w, e)
    }
    const windows = [...perWindow.keys()].sort()
    t.ok(windows.length >= 4, `requests spread over ${windows.length} windows`)
    for (const w of windows) {
      const e = perWindow.get(w)!
      t.ok(e.admitted <= LIMIT, `window ${w}: ${e.admitted} admitted ≤ ${LIMIT} (${e.limited} limited)`)
    }
    // The windows the load covered from start to end (all but the first and last) are saturated: exactly the limit.
    for (const w of windows.slice(1, -1)) {
      t.equal(perWindow.get(w)!.admitted, LIMIT, `window ${w}: exactly ${LIMIT} admitted across the three replicas`)
    }
    const admittedByReplica = replicas.map(() => 0)
    for (const [i, m] of replicas.entries()) {
      const metrics = (await call(m.url + '/metrics')).text
      const match = /meterd_ratelimit_requests_total\{bucket="metering",decision="allowed",reason="none"\} (\d+)/.exec(metrics)
      admittedByReplica[i] = Number(match?.[1])
    }
    t.ok(admittedByReplica.every((n) => n > 0), `every replica admitted some (${admittedByReplica.join(', ')})`)
    for (const m of replicas) t.equal(await m.stop(), 0, 'a replica stops cleanly')
  })

  t.test('error-pattern blocks are shared by replicas; blocked requests do not consume the bucket', async (t) => {
    const redis = await startRedis(t)
    const a = await startMeterd(t, { frozenNow: T0, config: redisConfig(redis.url) })
    const b = await startMeterd(t, { frozenNow: T0, config: redisConfig(redis.url) })
    const ka = await a.key({ account: 'errs' })
    const kb = await b.key({ account: 'errs' })
    const statuses = new Set<number>()
    for (let i = 0; i < 50; i++) statuses.add((await call(a.url + COMPLETIONS, { key: ka, body: { ...completion(), provider: '' } })).status)
    t.same([...statuses], [400], '50 bad requests answered 400 on one replica')
    // observe() records asynchronously in redis mode; the next request sees it.
    await new Promise((r) => setTimeout(r, 50))
    const onB = await call(b.url + COMPLETIONS, { key: kb, body: completion() })
    t.equal(onB.status, 429, 'the other replica blocks the account')
    t.equal(onB.headers.get('x-ratelimit-limited-reason'), 'error-pattern')
    t.equal(onB.headers.get('retry-after'), '30')
    t.notOk('bucket' in onB.body.error)
    t.equal(onB.headers.get('x-ratelimit-remaining'), '950', 'the 50 bad requests were counted, the blocked one not')
    const cachedOnB = await call(b.url + COMPLETIONS, { key: kb, body: completion() })
    t.equal(cachedOnB.status, 429, 'refused again, from the replica\'s cache of blocks')
    t.equal(cachedOnB.headers.get('x-ratelimit-remaining'), '950', 'a cached block still says what is left of the window')
    const client = new Redis(redis.url)
    t.teardown(() => client.disconnect())
    t.equal(await client.get(`meterd:rl:{a:errs}:metering:${Math.floor(T0 / 1000)}`), '50', 'the window counter lives in Redis')

    a.clock.advance(30_000)
    b.clock.advance(30_000)
    t.equal((await call(b.url + COMPLETIONS, { key: kb, body: completion() })).status, 201, 'cleared after the cooldown')
    for (let i = 0; i < 50; i++) await call(b.url + COMPLETIONS, { key: kb, body: { ...completion(), provider: '' } })
    await new Promise((r) => setTimeout(r, 50))
    const again = await call(a.url + COMPLETIONS, { key: ka, body: completion() })
    t.equal(again.headers.get('retry-after'), '60', 'a consecutive violation doubles the cooldown, across replicas')
  })

  t.test('fail_open (default): Redis unreachable → admitted, limited per replica, logged and counted; recovers', async (t) => {
    const port = await freePort()
    const m = await startMeterd(t, {
      frozenNow: T0,
      config: redisConfig(`redis://127.0.0.1:${port}`, { limits: { platform: 3 } }),
    })
    const key = await m.key({ account: 'open' })
    const statuses: number[] = []
    for (let i = 0; i < 4; i++) {
      const r = await call(m.url + COMPLETIONS, { key, body: completion() })
      statuses.push(r.status)
      t.equal(r.headers.get('x-ratelimit-limit'), '1000', 'headers still present')
    }
    t.same(statuses, [201, 201, 201, 201], 'requests are admitted while Redis is down')
    const platform = []
    for (let i = 0; i < 4; i++) platform.push((await call(m.url + '/profitstream/v2/api/anything', { key })).status)
    t.same(platform, [404, 404, 404, 429], 'the replica still enforces the limit on its own')
    const metrics = (await call(m.url + '/metrics')).text
    const failures = Number(/meterd_ratelimit_backend_failures_total\{backend="redis"\} (\d+)/.exec(metrics)?.[1])
    t.ok(failures >= 8, `failures counted (${failures})`)
    t.equal(m.logs.filter((l) => l.includes('redis is unreachable')).length, 1, 'logged once per outage')

    // Redis comes up: the replica reconnects and shares state through it again.
    const redis = await startRedis(t, port)
    const client = new Redis(redis.url)
    t.teardown(() => client.disconnect())
    m.clock.advance(1000)
    const until = Date.now() + 10_000
    let counted: string | null = null
    while (Date.now() < until) {
      await call(m.url + COMPLETIONS, { key, body: completion() })
      counted = await client.get(`meterd:rl:{a:open}:metering:${Math.floor(m.clock.now / 1000)}`)
      if (counted !== null) break
      await new Promise((r) => setTimeout(r, 100))
    }
    t.ok(counted !== null && Number(counted) >= 1, 'after Redis returns, windows are counted in it again')
    t.ok(m.logs.some((l) => l.includes('redis is reachable again')), 'recovery logged')
  })

  t.test('fail_open: false → 503 while Redis is unreachable', async (t) => {
    const port = await freePort()
    const m = await startMeterd(t, { config: redisConfig(`redis://127.0.0.1:${port}`, { redis: { url: `redis://127.0.0.1:${port}`, fail_open: false } }) })
    const key = await m.key()
    const r = await call(m.url + COMPLETIONS, { key, body: completion() })
    t.equal(r.status, 503)
    t.equal(r.body.error.type, 'api_error')
    t.equal(r.body.error.code, 'rate_limiter_unavailable')
    t.equal(r.headers.get('retry-after'), '1')
    t.equal(r.headers.get('x-ratelimit-bucket'), 'metering', 'the 503 still carries the rate-limit headers')
    t.equal(r.headers.get('x-ratelimit-remaining'), '0')
  })
}
