/**
 * A gateway replica killed between its commit and its answer (issue 19 §3): its records are in
 * its LMDB, but their transactionId claims in Redis never became dedup entries. The claims are
 * noted in the records' own write unit, and the replica settles them when it starts again, so
 * the client's retry on another replica, after the claims expired, finds the records stored
 * instead of storing them twice. The moment is made exact with Redis's CLIENT PAUSE WRITE: the
 * replica claims, commits, and then cannot write the entries before it is killed.
 */
import { join } from 'node:path'
import { Redis } from 'ioredis'
import t from 'tap'
import { DEFAULT_CONFIG_PATH } from '../../src/core/config/load.js'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { completion } from '../fixtures/wire-examples.js'
import { ADMIN_KEY, call, removeDir, spawnMeterd, tempDir, writeConfig, type ChildMeterd } from '../helpers/meterd.js'
import { COMPLETIONS } from '../helpers/pricing.js'
import { haveRedis, startRedis } from '../helpers/redis-server.js'

const N = 200
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

async function storedOf(m: ChildMeterd, txs: string[]): Promise<Map<string, string[]>> {
  const out = new Map<string, string[]>()
  for (const tx of txs) {
    const res = await call(`${m.url}${COMPLETIONS}?transactionId=${encodeURIComponent(tx)}`, { key: ADMIN_KEY })
    if (res.status !== 200) throw new Error(`list: ${res.status} ${res.text}`)
    const ids = (res.body?._embedded?.aICompletionMetricResourceList ?? []).map((r: { id: string }) => r.id)
    if (ids.length) out.set(tx, ids)
  }
  return out
}

if (!haveRedis) {
  t.skip('redis-server is not installed (apt-get install redis-server)')
} else {
  t.setTimeout(180_000)
  t.test('a replica killed between commit and answer: the retry on another replica, after the claims expired, is not stored twice', async (t) => {
    const redis = await startRedis()
    t.teardown(() => redis.stop())
    const admin = new Redis(redis.url)
    t.teardown(() => admin.disconnect())
    const dir = tempDir('meterd-settle-')
    t.teardown(() => removeDir(dir))
    const override = writeConfig(dir, {
      server: { shared_state: { redis: { resync_seconds: 60, claim_ttl_seconds: 2 } } },
      extensions: { ratelimit: { limits: { metering: 100000, analytics: 100000, platform: 100000 }, error_pattern: { enabled: false } } },
    })
    const configFiles = [DEFAULT_CONFIG_PATH, join(PACKAGE_ROOT, 'config', 'gateway.yaml'), override]
    const env = { METERD_REDIS_URL: redis.url, METERD_WORKERS: '1' }
    const start = (i: number) => spawnMeterd(t, { dataDir: join(dir, `data-${i}`), configFiles, env })
    const a = await start(0)
    const b = await start(1)

    const batch = Array.from({ length: N }, () => completion())
    const txs = batch.map((r) => r.transactionId as string)
    const sent = call(a.url + '/meter/v2/ai/completions', { key: ADMIN_KEY, body: batch }).catch(() => undefined)
    // Every claim taken: from now on no replica may write to Redis (reads go on).
    for (let i = 0; (await admin.keys('meterd:tx:*')).length < N; i++) {
      if (i > 1000) throw new Error('the claims were never taken')
      await sleep(2)
    }
    await admin.call('CLIENT', 'PAUSE', '10000', 'WRITE')
    await sleep(700) // A commits its records; its dedup entries wait on the pause
    await a.stop('SIGKILL')
    await sent
    await admin.call('CLIENT', 'UNPAUSE')
    const pending = (await Promise.all(txs.map((tx) => admin.get(`meterd:tx:default\0completion\0${tx}`)))).filter((v) => v?.startsWith('p:')).length
    t.equal(pending, N, 'the claims were left pending')

    await sleep(2500) // the claims expire
    const again = await start(0)
    const storedOnA = await storedOf(again, txs)
    t.equal(storedOnA.size, N, 'the records were committed on the killed replica')
    await sleep(300) // its start settles what it noted

    // The client's retry, on the other replica.
    const retry = await call(b.url + '/meter/v2/ai/completions', { key: ADMIN_KEY, body: batch })
    t.equal(retry.status, 201, retry.text.slice(0, 200))
    t.equal((await storedOf(b, txs)).size, 0, 'the other replica stores none of them again')
    const answered = (retry.body?.ids ?? retry.body) as unknown
    t.same(
      Array.isArray(answered) ? answered.map((r: any) => r.id) : [],
      txs.map((tx) => storedOnA.get(tx)![0]),
      'and answers the ids stored on the killed replica',
    )
  })
}
