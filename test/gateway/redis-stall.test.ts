/**
 * Redis slow rather than down. A real redis-server is held busy by a Lua script for longer than
 * command_timeout_ms: the replicas answer what is in flight 503 (or 201 once Redis answers), stay
 * up, and lose nothing they acknowledged. And a replica's own stalled event loop is not taken for
 * a slow Redis: a command Redis answered while the loop was blocked is not failed as timed out.
 */
import t from 'tap'
import { COMMAND_TIMED_OUT, RedisClient } from '../../src/store/redis/connection.js'
import { completion } from '../fixtures/wire-examples.js'
import { startGatewayCluster, within } from '../helpers/gateway.js'
import { API, COMPLETIONS } from '../helpers/pricing.js'
import { ADMIN_KEY, call, type ChildMeterd } from '../helpers/meterd.js'
import { haveRedis, stallRedis, startRedis } from '../helpers/redis-server.js'

const POST_COMPLETION = '/meter/v2/ai/completions'

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

function client(t: { teardown(fn: () => void): void }, url: string, timeoutMs: number): RedisClient {
  const redis = new RedisClient(url, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 }, timeoutMs)
  redis.on('error', () => undefined)
  t.teardown(() => redis.disconnect())
  return redis
}

if (!haveRedis) {
  t.skip('redis-server is not installed (apt-get install redis-server)')
} else {
  t.setTimeout(120_000)

  t.test('a command Redis answered while this process was blocked is not failed as timed out', async (t) => {
    const redis = await startRedis()
    t.teardown(() => redis.stop())
    const r = client(t, redis.url, 200)
    await r.connect()
    // Sent, then the event loop blocked for twice the bound before it could read the answer.
    const set = r.set('k', 'v').then(
      (v) => v,
      (e: Error) => e.message,
    )
    setImmediate(() => {
      const until = Date.now() + 400
      while (Date.now() < until);
    })
    t.equal(await set, 'OK', 'the answer read after the stall counts')
    t.equal(await r.get('k'), 'v')
  })

  t.test('a command Redis does not answer in time fails at the bound, not when Redis lets go', async (t) => {
    const redis = await startRedis()
    t.teardown(() => redis.stop())
    const r = client(t, redis.url, 200)
    await r.connect()
    const stalled = stallRedis(redis.port, 1.5)
    await sleep(100)
    const t0 = performance.now()
    const outcome = await r.ping().then(
      () => 'answered',
      (e: Error) => e.message,
    )
    const took = performance.now() - t0
    t.equal(outcome, COMMAND_TIMED_OUT)
    t.ok(took >= 190 && took < 1000, `failed after ${took.toFixed(0)} ms (bound 200 ms, Redis busy for 1.5 s)`)
    await stalled
    t.equal(await r.ping(), 'PONG', 'the connection serves again')
  })

  t.test('three replicas while Redis stalls past command_timeout_ms: they answer 201 or 503, stay up, and keep every record they acknowledged', async (t) => {
    const { redis, replicas } = await startGatewayCluster(t)

    // Redis busy for 2 s (command_timeout_ms is 1 s); requests of every kind that need it go in meanwhile.
    const stalled = stallRedis(redis.port, 2)
    await sleep(150)
    const bodies = replicas.flatMap((_, i) => [0, 1, 2].map(() => ({ i, body: completion() })))
    const sent = Promise.all(bodies.map(({ i, body }) => call(replicas[i].url + POST_COMPLETION, { key: ADMIN_KEY, body })))
    const created = call(`${replicas[0].url}${API}/export-configurations`, { key: ADMIN_KEY, body: { name: 'during the stall', url: 'http://127.0.0.1:9/hook', eventTypes: ['alert.triggered'] } })
    const answers = [...(await sent), await created]
    await stalled
    const statuses = answers.map((a) => a.status)
    t.ok(
      statuses.every((s) => s === 201 || s === 503),
      `201 or 503, nothing else: ${statuses.join(', ')}`,
    )
    t.ok(statuses.includes(503), 'requests that waited on Redis past the bound were refused')
    for (const a of answers.filter((a) => a.status === 503)) {
      t.equal(a.body?.error?.code, 'shared_state_unavailable')
      t.equal(a.headers.get('retry-after'), '1')
    }

    // Every replica is up and serving after the stall.
    await sleep(1000)
    for (const [i, m] of replicas.entries()) {
      t.equal(m.proc.exitCode, null, `replica ${i} is still running`)
      t.equal((await call(m.url + '/readyz')).status, 200, `replica ${i} is ready`)
    }

    // The client retries what was refused (same body): each record stored once, on the replica it went to.
    const acked = new Map<string, { i: number; id: string }>()
    for (const [n, { i, body }] of bodies.entries()) {
      let res = answers[n]
      for (let tries = 0; res.status === 503 && tries < 20; tries++) {
        await sleep(Number(res.headers.get('retry-after') ?? 1) * 100)
        res = await call(replicas[i].url + POST_COMPLETION, { key: ADMIN_KEY, body })
      }
      t.equal(res.status, 201, res.text)
      acked.set(body.transactionId as string, { i, id: res.body?.id })
    }
    for (const [tx, { i, id }] of acked) {
      const lists = await Promise.all(replicas.map((m) => call(`${m.url}${COMPLETIONS}?transactionId=${encodeURIComponent(tx)}`, { key: ADMIN_KEY })))
      const ids = lists.map((l) => (l.body?._embedded?.aICompletionMetricResourceList ?? []).map((r: { id: string }) => r.id))
      t.same(
        ids.map((x) => x.length),
        replicas.map((_, j) => (j === i ? 1 : 0)),
        `${tx}: stored once, by replica ${i}`,
      )
      t.equal(ids[i][0], id, 'the record the client was told of')
    }

    // The export configuration sent during the stall: whatever Redis made of it, all three replicas agree.
    const names = async (m: ChildMeterd) =>
      JSON.stringify((((await call(`${m.url}${API}/export-configurations`, { key: ADMIN_KEY })).body?.data ?? []) as { id: string }[]).map((c) => c.id).sort())
    await within(3000, async () => {
      const seen = await Promise.all(replicas.map(names))
      return seen.every((s) => s === seen[0])
    }).then(
      () => t.pass('every replica shows the same export configurations'),
      (e: Error) => t.fail(`the replicas disagree on the export configurations: ${e.message}`),
    )
  })
}
