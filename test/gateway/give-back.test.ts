/**
 * Tier quantities of a request that fails after pricing (gateway cluster). The quantities are
 * shared in Redis and move before the record commits to the replica's LMDB; when the commit then
 * fails, the request gives back what it counted, so the client's retry (here on another replica)
 * is priced as if the failed attempt never happened. The failing commit is a real one: the
 * replica runs under a file-size limit (`prlimit --fsize`, as test/foundation/disk-full.test.ts)
 * and its store is filled until LMDB's commits fail.
 */
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import t from 'tap'
import { DEFAULT_CONFIG_PATH } from '../../src/core/config/load.js'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { completion } from '../fixtures/wire-examples.js'
import { ADMIN_KEY, call, removeDir, spawnMeterd, tempDir, writeConfig } from '../helpers/meterd.js'
import { API, EVENTS, TIERS, event, sum, toolBody } from '../helpers/pricing.js'
import { haveRedis, startRedis } from '../helpers/redis-server.js'

const hasPrlimit = spawnSync('prlimit', ['--version']).status === 0
const LIMIT = `--fsize=${12 * 1024 * 1024}:unlimited`
const POST_COMPLETION = '/meter/v2/ai/completions'
const POST_TOOL_EVENT = '/meter/v2/tool/events'
const LONG = 'x'.repeat(200)

if (!haveRedis || !hasPrlimit) {
  t.skip('needs redis-server and prlimit (util-linux)')
} else {
  t.setTimeout(240_000)
  t.test('a request whose commit fails gives its tier quantities back: the retry is priced as if it never failed', async (t) => {
    const redis = await startRedis()
    t.teardown(() => redis.stop())
    const dir = tempDir('meterd-give-back-')
    t.teardown(() => removeDir(dir))
    const override = writeConfig(dir, {
      server: { shared_state: { redis: { resync_seconds: 60 } } },
      extensions: { ratelimit: { limits: { metering: 100000, analytics: 100000, platform: 100000 }, error_pattern: { enabled: false } } },
    })
    const configFiles = [DEFAULT_CONFIG_PATH, join(PACKAGE_ROOT, 'config', 'gateway.yaml'), override]
    const env = { METERD_REDIS_URL: redis.url, METERD_WORKERS: '1' }
    const full = await spawnMeterd(t, { dataDir: join(dir, 'data-0'), configFiles, env, prefix: ['prlimit', LIMIT] })
    const others = [await spawnMeterd(t, { dataDir: join(dir, 'data-1'), configFiles, env }), await spawnMeterd(t, { dataDir: join(dir, 'data-2'), configFiles, env })]

    const created = await call(`${others[0].url}${API}/tools`, { key: ADMIN_KEY, body: toolBody('give-back', { name: 'units', aggregationType: 'SUM', tiersMode: 'graduated', tiers: TIERS }) })
    t.equal(created.status, 201, created.text)
    // The tool reaches the full replica before its store fills (its mirror is an LMDB write too).
    for (let i = 0; ; i++) {
      if ((await call(`${full.url}${API}/tools/${created.body.id}`, { key: ADMIN_KEY })).status === 200) break
      if (i > 200) throw new Error('the tool never reached replica 0')
      await new Promise((r) => setTimeout(r, 10))
    }

    // 400 units counted in the period first (another replica), so the batch below crosses 1,000.
    const first = Array.from({ length: 100 }, () => event('give-back', { usageMetadata: { units: 4 } }))
    t.equal((await call(others[1].url + POST_TOOL_EVENT, { key: ADMIN_KEY, body: first })).status, 201, 'the first 400 units are stored')

    // Replica 0's store fills: batches until LMDB refuses one, then smaller ones until one of 50
    // is refused, so that the much larger batch below cannot fit.
    let size = 500
    for (let n = 0; n < 400 && size >= 50; n++) {
      const body = Array.from({ length: size }, (_, i) => completion({ transactionId: `fill-${n}-${i}-${LONG}` }))
      const r = await call(full.url + POST_COMPLETION, { key: ADMIN_KEY, body })
      if (r.status === 201) continue
      t.equal(r.status, 503, `a batch of ${size} is refused: ${r.body?.error?.code}`)
      size = Math.floor(size / 3)
    }
    t.ok(size < 50, "replica 0's commits fail")

    // 1,000 events of 1.5 units (1,500 units: 600 at 0.01 then 900 at 0.008).
    const batch = Array.from({ length: 1000 }, (_, i) => event('give-back', { transactionId: `gb-${i}-${LONG}`, usageMetadata: { units: 1.5 } }))
    const failed = await call(full.url + POST_TOOL_EVENT, { key: ADMIN_KEY, body: batch })
    t.equal(failed.status, 503, `the batch is priced, then its commit fails: ${failed.text.slice(0, 200)}`)
    t.equal(failed.body?.error?.code, 'store_unwritable')

    // The client retries on another replica (a load balancer would): priced as if the first attempt never happened.
    const retry = await call(others[0].url + POST_TOOL_EVENT, { key: ADMIN_KEY, body: batch })
    t.equal(retry.status, 201, retry.text.slice(0, 200))
    const stored: any[] = []
    for (const m of others) {
      for (let page = 0; ; page++) {
        const res = await call(`${m.url}${EVENTS}?toolId=give-back&size=1000&page=${page}`, { key: ADMIN_KEY })
        const items = res.body?._embedded?.toolEventMetricResourceList ?? []
        stored.push(...items)
        if (items.length < 1000) break
      }
    }
    const retried = stored.filter((r) => String(r.transactionId).startsWith('gb-'))
    t.equal(retried.length, 1000, 'the retried batch is stored once')
    t.equal(sum(retried.map((r) => r.cost.total)), '13.2', 'its cost is C(1900) − C(400) = 6 + 7.2: the failed attempt counted nothing')
    t.equal(sum(stored.map((r) => r.cost.quantities.units)), '1900', 'the period holds the stored units')
    t.equal(sum(stored.map((r) => r.cost.total)), '17.2', 'and its stored costs add up to C(1900) of the table')
  })
}
