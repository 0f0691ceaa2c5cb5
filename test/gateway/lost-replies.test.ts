/**
 * Redis slow rather than down, what a lost answer leaves behind. A real redis-server is held busy
 * (a Lua loop) for longer than command_timeout_ms: a command sent meanwhile fails as timed out and
 * its request gets 503, but Redis runs the command once it lets go. A tier move made that way is
 * given back (the period still adds up to C(total) after the client's retry), and a claim made
 * that way is released (the client's retry is served at once, not after claim_ttl_seconds); a
 * replica that stops meanwhile does so first, within shutdown_timeout_ms.
 */
import { connect } from 'node:net'
import { join } from 'node:path'
import { Redis } from 'ioredis'
import { pino } from 'pino'
import t from 'tap'
import { Decimal } from '../../src/domain/pricing/money.js'
import type { PricingElement } from '../../src/model/pricing-element.js'
import type { SharedState } from '../../src/ports/shared.js'
import type { ToolCharge } from '../../src/ports/tiers.js'
import { Outage, RedisClient } from '../../src/store/redis/connection.js'
import { RedisTierQuantities } from '../../src/store/redis/tiers.js'
import { completion } from '../fixtures/wire-examples.js'
import { openReplica, startGatewayCluster } from '../helpers/gateway.js'
import { ADMIN_KEY, call, removeDir, tempDir, writeConfig } from '../helpers/meterd.js'
import { haveRedis, stallRedis, startRedis } from '../helpers/redis-server.js'

const POST_COMPLETION = '/meter/v2/ai/completions'
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

// C(q): 0.01 a unit up to 100, then 0.008.
const UNITS: PricingElement = {
  name: 'units',
  unitPrice: '0',
  aggregationType: 'SUM',
  tiersMode: 'graduated',
  tiers: [
    { upTo: '100', unitPrice: '0.01' },
    { upTo: null, unitPrice: '0.008' },
  ],
}
const SCOPE = ['team', 'tool', '2026-11']
const charge = (recordId: string, units: number): ToolCharge => ({ recordId, scope: SCOPE, elements: [UNITS], usageMetadata: { units } })

/** The next call of the script `name` stalls Redis (1 s, three times the bound, unless told) just before it is sent: it runs once Redis lets go, its answer too late. */
function stallBefore(redis: object, port: number, name: 'meterdAggCas' | 'meterdAggGiveBack', seconds = 1) {
  const scripted = redis as Record<string, (...args: unknown[]) => Promise<number>>
  const original = scripted[name].bind(redis)
  const stall: { stalled?: Promise<void> } = {}
  scripted[name] = async (...args: unknown[]) => {
    scripted[name] = original
    stall.stalled = stallRedis(port, seconds)
    await sleep(150)
    return original(...args)
  }
  return stall
}

/** The gateway's tier quantities in this process, on a real redis-server (a 300 ms command bound); `quantity()` reads the units' SUM. */
async function tierQuantities(t: { teardown(fn: () => unknown): void }) {
  const server = await startRedis()
  t.teardown(() => server.stop())
  const redis = new RedisClient(server.url, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 }, 300)
  redis.on('error', () => undefined)
  t.teardown(() => redis.disconnect())
  await redis.connect()
  const tiers = new RedisTierQuantities(redis, 'test:', new Outage(pino({ level: 'silent' }), server.url, { inc() {} }))
  const quantity = async () => JSON.parse((await redis.hget(`test:agg:${JSON.stringify([...SCOPE, 'units'])}`, 'a')) ?? '{"sum":"0"}').sum as string
  return { server, redis, tiers, quantity }
}

/** The shared state's command connection (the tier store's), for stallBefore. */
const commandConnection = (shared: SharedState): object => (shared.tiers as unknown as { redis: object }).redis

/** The client retries (same body, same headers) on `url` until served; resolves with the last answer, what it saw and how long it took. */
async function retryUntilServed(url: string, r: { body: unknown; headers: Record<string, string> }) {
  const t0 = performance.now()
  let res = await call(url + POST_COMPLETION, { key: ADMIN_KEY, ...r })
  const seen = [res.status]
  while (res.status !== 201 && performance.now() - t0 < 5000) {
    await sleep(100)
    res = await call(url + POST_COMPLETION, { key: ADMIN_KEY, ...r })
    seen.push(res.status)
  }
  return { res, seen, took: performance.now() - t0 }
}

if (!haveRedis) {
  t.skip('redis-server is not installed (apt-get install redis-server)')
} else {
  t.setTimeout(120_000)

  t.test("a tier move whose answer is lost, but which Redis made, is given back: the retry is priced as if it never happened", async (t) => {
    const { server, redis, tiers, quantity } = await tierQuantities(t)

    const costs: string[] = []
    const [first] = await tiers.apply([charge('r1', 90)], 0)
    costs.push(first.parts.units)

    // Redis stalls (1 s, three times the bound) just as the event's compare-and-set is sent, after
    // its read was answered: the script runs once Redis lets go, its answer comes too late.
    const stall = stallBefore(redis, server.port, 'meterdAggCas')
    await t.rejects(tiers.count([charge('r2', 20)], 0), { status: 503, code: 'shared_state_unavailable' }, 'the request is refused: nothing stored')
    t.ok(stall.stalled, 'the stall caught the compare-and-set')
    await stall.stalled
    const t0 = performance.now()
    while ((await quantity()) !== '90' && performance.now() - t0 < 1000) await sleep(10)
    t.equal(await quantity(), '90', `the move Redis made after the 503 is given back (${(performance.now() - t0).toFixed(0)} ms after Redis answered)`)

    // The client's retry: priced C(110) − C(90), and the period's stored events add up to C(110).
    const [retry] = await tiers.apply([charge('r2', 20)], 0)
    costs.push(retry.parts.units)
    t.equal(retry.parts.units, '0.18', 'the retry is priced from 90 units, not from 110')
    t.equal(await quantity(), '110')
    t.equal(costs.reduce((a, c) => a.plus(c), new Decimal(0)).toFixed(), '1.08', 'the stored events add up to C(110) = 1 + 0.08')
  })

  t.test('a give-back whose answer is lost is tried again once Redis answers, and made once (with those owed since)', async (t) => {
    const { server, redis, tiers, quantity } = await tierQuantities(t)

    await tiers.apply([charge('r1', 90)], 0)
    const counted = await tiers.count([charge('r2', 20)], 0)
    const other = await tiers.count([charge('r3', 5)], 0)
    t.equal(await quantity(), '115')

    // The request fails unstored; Redis stalls just as its give-back is sent, and makes it late.
    // Another request fails meanwhile: its give-back goes with the first one's retry.
    const stall = stallBefore(redis, server.port, 'meterdAggGiveBack')
    const first = counted.giveBack()
    await sleep(50)
    const second = other.giveBack().catch(() => undefined)
    await t.rejects(first, { status: 503, code: 'shared_state_unavailable' }, 'the give-back is not answered in time')
    t.ok(stall.stalled, 'the stall caught the give-back')
    await stall.stalled
    await second
    // Tried again until answered: the first one's mark says it was made, so its 20 units go once,
    // not twice, and the other request's 5 go too.
    await sleep(1000)
    t.equal(await quantity(), '90', 'back to 90 units (70 if the 20 went twice, 95 if the 5 stayed)')
    const [next] = await tiers.apply([charge('r3', 20)], 0)
    t.equal(next.parts.units, '0.18', 'the next event is priced from 90 units')
  })

  t.test('claims whose answer is lost are released once Redis answers: the retries are served at once, not after claim_ttl_seconds', async (t) => {
    // Claims held for 30 s unless released: a retry that waited for their expiry is told apart.
    const { redis, replicas: [replica] } = await startGatewayCluster(t, { count: 1, redis: { claim_ttl_seconds: 30 } })

    // Redis busy for 2 s (command_timeout_ms is 1 s): the claims are sent, answered too late, and made.
    const keyed = { body: completion(), headers: { 'idempotency-key': `lost-${Date.now()}` } }
    const withTx = { body: completion(), headers: {} }
    const stalled = stallRedis(redis.port, 2)
    await sleep(150)
    const refused = await Promise.all([keyed, withTx].map((r) => call(replica.url + POST_COMPLETION, { key: ADMIN_KEY, ...r })))
    for (const r of refused) {
      t.equal(r.status, 503, r.text)
      t.equal(r.body?.error?.code, 'shared_state_unavailable')
    }
    await stalled

    // The client retries (same body, same key) until served: at once, not 409 (or a wait) for 30 s.
    for (const [name, r] of [['Idempotency-Key', keyed], ['transactionId', withTx]] as const) {
      const { res, seen, took } = await retryUntilServed(replica.url, r)
      t.equal(res.status, 201, `the ${name} retry is served (${seen.join(', ')}): ${res.text.slice(0, 200)}`)
      t.ok(took < 2000, `within ${took.toFixed(0)} ms of Redis answering`)
    }
  })

  t.test('a replica that stops before Redis answers first gives back the tier move it owes: the retry on another replica is priced as if the refused event had never come', async (t) => {
    const server = await startRedis()
    t.teardown(() => server.stop())
    const dir = tempDir('meterd-lost-replies-')
    t.teardown(() => removeDir(dir))
    const admin = new Redis(server.url)
    t.teardown(() => admin.disconnect())
    const quantity = async () => JSON.parse((await admin.hget(`meterd:agg:${JSON.stringify([...SCOPE, 'units'])}`, 'a')) ?? '{"sum":"0"}').sum as string
    const a = await openReplica(t, join(dir, 'data-a'), server.url, { command_timeout_ms: 300 })
    await a.shared.tiers.apply([charge('r1', 90)], 0)

    // Redis stalls (2 s) just as the event's compare-and-set is sent: the move and the give-back's
    // read of its mark go unanswered (300 ms each), the request is refused, the move is owed.
    const stall = stallBefore(commandConnection(a.shared), server.port, 'meterdAggCas', 2)
    await t.rejects(a.shared.tiers.count([charge('r2', 20)], 0), { status: 503, code: 'shared_state_unavailable' }, 'the request is refused: nothing stored')
    t.ok(stall.stalled, 'the stall caught the compare-and-set')
    let answered = false
    void stall.stalled!.then(() => (answered = true))
    t.notOk(answered, 'Redis has not answered yet')

    // The replica stops meanwhile, with up to 5 s to settle.
    const t0 = performance.now()
    await a.shared.close(5000)
    t.equal(await quantity(), '90', `the move Redis made after the 503 was given back before the replica closed (${(performance.now() - t0).toFixed(0)} ms)`)

    // The client's retry, on another replica: priced C(110) − C(90).
    const b = await openReplica(t, join(dir, 'data-b'), server.url, { command_timeout_ms: 300 })
    const [retry] = await b.shared.tiers.apply([charge('r2', 20)], 0)
    t.equal(retry.parts.units, '0.18', 'the retry is priced from 90 units, not from 110')
    t.equal(await quantity(), '110')
  })

  t.test('a replica stopped (SIGTERM) before Redis answers first releases the claims whose answer was lost: the retries on another replica are served at once', async (t) => {
    // Claims of a replica that dies expire after 10 s: a retry that waited for that is told apart.
    const cluster = await startGatewayCluster(t, { count: 2, redis: { claim_ttl_seconds: 10 } })
    const [a, b] = cluster.replicas

    // Redis busy for 3 s (command_timeout_ms is 1 s): the claims are sent, answered too late, and
    // made. A transactionId's release went right behind its claim, and runs whatever the replica
    // does; an Idempotency-Key's is sent only once Redis has answered the read of the claim's
    // owner, so the replica must still be there (it waits for that in its stop).
    const keyed = { body: completion(), headers: { 'idempotency-key': `stop-${Date.now()}` } }
    const withTx = { body: completion(), headers: {} }
    const stalled = stallRedis(cluster.redis.port, 3)
    let answered = false
    void stalled.then(() => (answered = true))
    await sleep(150)
    const refused = await Promise.all([keyed, withTx].map((r) => call(a.url + POST_COMPLETION, { key: ADMIN_KEY, ...r })))
    for (const r of refused) {
      t.equal(r.status, 503, r.text)
      t.equal(r.body?.error?.code, 'shared_state_unavailable')
    }
    t.notOk(answered, 'Redis has not answered yet')
    t.equal(await a.stop('SIGTERM'), 0, 'the replica stops cleanly')
    await stalled

    for (const [name, r] of [['Idempotency-Key', keyed], ['transactionId', withTx]] as const) {
      const { res, seen, took } = await retryUntilServed(b.url, r)
      t.equal(res.status, 201, `the ${name} retry on the other replica is served (${seen.join(', ')}): ${res.text.slice(0, 200)}`)
      t.ok(took < 2000, `within ${took.toFixed(0)} ms, not after claim_ttl_seconds`)
    }
  })

  t.test('a replica whose drain uses all of shutdown_timeout_ms still releases, in the second it keeps for it, the claim whose answer was lost', async (t) => {
    const cluster = await startGatewayCluster(t, { count: 0, redis: { claim_ttl_seconds: 10 } })
    cluster.configFiles.push(writeConfig(cluster.dir, { server: { shutdown_timeout_ms: 500 } }, 'stop.yaml'))
    const a = await cluster.start(0)
    const b = await cluster.start(1)

    // A client uploading slowly: its request is in flight until the stop cuts it, 500 ms after SIGTERM.
    const port = Number(new URL(a.url).port)
    const upload = connect(port, '127.0.0.1')
    upload.on('error', () => undefined)
    const cut = new Promise((r) => upload.on('close', r))
    upload.write(
      `POST ${POST_COMPLETION} HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: ${ADMIN_KEY}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n[`,
    )
    await sleep(200)

    // Redis busy for 2.2 s: the claim is sent, unanswered (1 s), and made when Redis lets go, about
    // 1 s after SIGTERM: past the drain's 500 ms, within the second kept for settling.
    const stalled = stallRedis(cluster.redis.port, 2.2)
    let answered = false
    void stalled.then(() => (answered = true))
    await sleep(150)
    const keyed = { body: completion(), headers: { 'idempotency-key': `drained-${Date.now()}` } }
    const refused = await call(a.url + POST_COMPLETION, { key: ADMIN_KEY, ...keyed })
    t.equal(refused.status, 503, refused.text)
    t.notOk(answered, 'Redis has not answered yet')
    t.equal(await a.stop('SIGTERM'), 0, 'the replica stops cleanly')
    await cut
    t.ok(answered, 'Redis answered before the replica exited')
    t.notOk(a.stdout.join('').includes('stopping with what Redis did not answer in time'), 'nothing was left unsettled')

    const { res, seen, took } = await retryUntilServed(b.url, keyed)
    t.equal(res.status, 201, `the retry on the other replica is served (${seen.join(', ')}): ${res.text.slice(0, 200)}`)
    t.ok(took < 2000, `within ${took.toFixed(0)} ms, not after claim_ttl_seconds`)
  })

  t.test('a replica stopped while Redis stays stalled exits within shutdown_timeout_ms and says what it left unsettled', async (t) => {
    const cluster = await startGatewayCluster(t, { count: 0 })
    cluster.configFiles.push(writeConfig(cluster.dir, { server: { shutdown_timeout_ms: 1500 } }, 'stop.yaml'))
    const a = await cluster.start(0)

    // Redis busy for 6 s: the claim is sent, unanswered (1 s), its release too.
    const stalled = stallRedis(cluster.redis.port, 6)
    await sleep(150)
    const refused = await call(a.url + POST_COMPLETION, { key: ADMIN_KEY, body: completion(), headers: { 'idempotency-key': `down-${Date.now()}` } })
    t.equal(refused.status, 503, refused.text)
    const t0 = performance.now()
    t.equal(await a.stop('SIGTERM'), 0, 'the replica stops cleanly')
    const took = performance.now() - t0
    // Without the bound on QUIT it took 3.5 s (each connection's QUIT and the lease's release waited command_timeout_ms in turn).
    t.ok(took < 3000, `it stopped within shutdown_timeout_ms (1.5 s) and the exit (${took.toFixed(0)} ms)`)
    const warned = a.stdout
      .join('')
      .split('\n')
      .filter((l) => l.includes('stopping with what Redis did not answer in time'))
      .map((l) => JSON.parse(l))
    t.equal(warned.length, 1, 'what was left is logged at warn')
    t.match(warned[0], { level: 40, claims: 1, tierMoves: 0 }, 'one claim left')
    await stalled
  })
}
