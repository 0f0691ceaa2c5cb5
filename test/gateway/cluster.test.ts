/**
 * A gateway cluster on one machine: three `meterd run` processes, each with its own data
 * directory, sharing one real redis-server through config/gateway.yaml (server.shared_state).
 * Each subtest checks what a client behind a load balancer would notice: twins stored once,
 * tiers priced as one period, keys and tools seen by every replica, nothing acknowledged lost
 * when a replica dies, and a 503 with Retry-After (never a double count) when Redis is gone.
 */
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { Decimal } from '../../src/domain/pricing/money.js'
import { completion } from '../fixtures/wire-examples.js'
import { ADMIN_KEY, call, type ChildMeterd, type Res } from '../helpers/meterd.js'
import { API, COMPLETIONS, EVENTS, TIERS, event, sum, toolBody } from '../helpers/pricing.js'
import { haveRedis, startRedis } from '../helpers/redis-server.js'
import { startReceiver } from '../helpers/webhook-receiver.js'
import { cliRule } from '../helpers/alerts.js'
import { startGatewayCluster, within, type GatewayCluster } from '../helpers/gateway.js'

const POST_COMPLETION = '/meter/v2/ai/completions'
const POST_TOOL_EVENT = '/meter/v2/tool/events'
/** The bound docs/deployment.md states for a key, tool, configuration or rule change to reach every replica. */
const PROPAGATION_BOUND_MS = 100

type Cluster = GatewayCluster

const startCluster = (t: Test): Promise<Cluster> => startGatewayCluster(t)

/** The records each replica stored under a transactionId. */
async function storedUnder(c: Cluster, kind: 'completion' | 'tool', transactionId: string): Promise<string[][]> {
  const path = kind === 'tool' ? EVENTS : COMPLETIONS
  const list = kind === 'tool' ? 'toolEventMetricResourceList' : 'aICompletionMetricResourceList'
  return Promise.all(
    c.replicas.map(async (m) => {
      const res = await call(`${m.url}${path}?transactionId=${encodeURIComponent(transactionId)}`, { key: ADMIN_KEY })
      if (res.status !== 200) throw new Error(`list: ${res.status} ${res.text}`)
      return ((res.body?._embedded?.[list] ?? []) as { id: string }[]).map((r) => r.id)
    }),
  )
}

/** Every tool event of a tool stored by each replica, with its cost. */
async function toolRecordsBy(c: Cluster, toolId: string): Promise<any[][]> {
  const out: any[][] = []
  for (const m of c.replicas) {
    const mine: any[] = []
    for (let page = 0; ; page++) {
      const res = await call(`${m.url}${EVENTS}?toolId=${toolId}&size=1000&page=${page}`, { key: ADMIN_KEY })
      if (res.status !== 200) throw new Error(`list: ${res.status} ${res.text}`)
      const items = res.body?._embedded?.toolEventMetricResourceList ?? []
      mine.push(...items)
      if (items.length < 1000) break
    }
    out.push(mine)
  }
  return out
}

const toolRecords = async (c: Cluster, toolId: string): Promise<any[]> => (await toolRecordsBy(c, toolId)).flat()

/** `meterd keys …` run against replica i's data directory with the cluster's config. */
function cli(c: Cluster, i: number, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [join(PACKAGE_ROOT, 'bin', 'meterd.js'), ...args, ...c.configFiles.flatMap((f) => ['--config', f])], {
      env: { ...process.env, ...c.env, METERD_DATA_DIR: join(c.dir, `data-${i}`), METERD_LOG_LEVEL: 'warn' },
    })
    let stdout = ''
    let stderr = ''
    p.stdout.on('data', (d) => (stdout += d))
    p.stderr.on('data', (d) => (stderr += d))
    p.on('exit', (code) => resolve({ code, stdout, stderr }))
  })
}

/** C(q) of the worked graduated table (1,000 at 0.01, 9,000 at 0.008, the rest at 0.005). */
function graduatedCharge(q: number): string {
  const d = new Decimal(q)
  const t1 = Decimal.min(d, 1000)
  const t2 = Decimal.max(0, Decimal.min(d, 10000).minus(1000))
  const t3 = Decimal.max(0, d.minus(10000))
  return t1.times('0.01').plus(t2.times('0.008')).plus(t3.times('0.005')).toFixed()
}

if (!haveRedis) {
  t.skip('redis-server is not installed (apt-get install redis-server); the gateway cluster tests need a real one')
} else {
  // Three daemons, two restarts and a CLI run each: more than the default 120 s on a busy machine.
  t.setTimeout(360_000)
  t.test('a gateway cluster of three replicas on one Redis', async (t) => {
    const c = await startCluster(t)
    const [a, b] = c.replicas

    await t.test('the same transactionId posted to all three at once is stored once', async (t) => {
      for (let round = 0; round < 10; round++) {
        const body = completion()
        const answers = await Promise.all(c.replicas.map((m) => call(m.url + POST_COMPLETION, { key: ADMIN_KEY, body })))
        t.same(
          answers.map((r) => r.status),
          [201, 201, 201],
          'every replica answers 201',
        )
        const ids = new Set(answers.map((r) => r.body.id))
        t.equal(ids.size, 1, 'with the same id')
        const stored = (await storedUnder(c, 'completion', body.transactionId as string)).flat()
        t.equal(stored.length, 1, 'one record is stored, by one replica')
        t.same(stored, [...ids], 'under the id answered')
      }
    })

    await t.test('the same Idempotency-Key posted to all three at once is stored once', async (t) => {
      const body = completion()
      const headers = { 'idempotency-key': `idem-${Date.now()}` }
      const answers = await Promise.all(c.replicas.map((m) => call(m.url + POST_COMPLETION, { key: ADMIN_KEY, body, headers })))
      const created = answers.filter((r) => r.status === 201)
      t.ok(created.length >= 1, 'one request stores it')
      for (const r of answers) if (r.status !== 201) t.equal(r.status, 409, `the others wait (409 in progress): ${r.text}`)
      // Retries, on every replica, replay the one answer.
      const replays = await Promise.all(c.replicas.map((m) => call(m.url + POST_COMPLETION, { key: ADMIN_KEY, body, headers })))
      t.same(
        replays.map((r) => r.body?.id),
        [created[0].body.id, created[0].body.id, created[0].body.id],
        'a retry on any replica replays the id stored',
      )
      t.same((await storedUnder(c, 'completion', body.transactionId as string)).flat(), [created[0].body.id], 'one record')
    })

    await t.test('a graduated tier crossed by events spread over the replicas costs exactly the table total', async (t) => {
      const created = await call(`${a.url}${API}/tools`, {
        key: ADMIN_KEY,
        body: toolBody('cluster-tiers', { name: 'units', aggregationType: 'SUM', tiersMode: 'graduated', tiers: TIERS }),
      })
      t.equal(created.status, 201, created.text)
      // 300 events of 1 to 97 units (14,637 in all: every tier), 20 at a time on each replica.
      const units = Array.from({ length: 300 }, (_, i) => (i % 97) + 1)
      const total = units.reduce((s, u) => s + u, 0)
      let next = 0
      const answers: Res[] = []
      await Promise.all(
        Array.from({ length: 60 }, async (_, w) => {
          const m = c.replicas[w % 3]
          while (next < units.length) {
            const u = units[next++]
            answers.push(await call(m.url + POST_TOOL_EVENT, { key: ADMIN_KEY, body: event('cluster-tiers', { usageMetadata: { units: u } }) }))
          }
        }),
      )
      t.equal(answers.filter((r) => r.status === 201).length, 300, 'every event answered 201')
      const byReplica = await toolRecordsBy(c, 'cluster-tiers')
      t.ok(
        byReplica.every((r) => r.length > 0),
        `each replica priced some (${byReplica.map((r) => r.length).join(', ')})`,
      )
      const records = byReplica.flat()
      t.ok(
        records.every((r) => r.cost?.source !== 'unpriced'),
        'every replica knows the tool created on one',
      )
      t.equal(sum(records.map((r) => r.cost.quantities.units)), String(total), 'no unit lost or counted twice')
      t.equal(sum(records.map((r) => r.cost.total)), graduatedCharge(total), `the costs add up to C(${total}) of the table`)
    })

    await t.test('a key created on one replica works on the others within the stated bound; a revocation too', async (t) => {
      const made = await cli(c, 0, ['keys', 'create', '--team', 'cluster-team', '--scopes', 'metering:write,platform:read', '--json'])
      t.equal(made.code, 0, made.stderr)
      const { key, id } = JSON.parse(made.stdout)
      const works = (m: ChildMeterd) => async () => (await call(`${m.url}${API}/tools`, { key })).status === 200
      const took = await Promise.all(c.replicas.slice(1).map((m) => within(5000, works(m))))
      for (const ms of took) t.ok(ms <= PROPAGATION_BOUND_MS, `the key works on another replica after ${ms.toFixed(1)} ms`)

      const revoked = await cli(c, 1, ['keys', 'revoke', id])
      t.equal(revoked.code, 0, revoked.stderr)
      const refused = (m: ChildMeterd) => async () => (await call(`${m.url}${API}/tools`, { key })).status === 401
      for (const m of [c.replicas[0], c.replicas[2]]) {
        const ms = await within(5000, refused(m))
        t.ok(ms <= PROPAGATION_BOUND_MS, `revoked on another replica after ${ms.toFixed(1)} ms`)
      }
    })

    await t.test('a tool priced on one replica is priced the same on all, and so is a change of its price', async (t) => {
      const created = await call(`${b.url}${API}/tools`, {
        key: ADMIN_KEY,
        body: toolBody('cluster-flat', { name: 'calls', aggregationType: 'COUNT', tiersMode: 'volume', unitPrice: '0.25', tiers: [] }),
      })
      t.equal(created.status, 201, created.text)
      const costs = async () => {
        const out: string[] = []
        for (const m of c.replicas) {
          const body = event('cluster-flat')
          const r = await call(m.url + POST_TOOL_EVENT, { key: ADMIN_KEY, body })
          if (r.status !== 201) throw new Error(`${r.status} ${r.text}`)
          const stored = await call(`${m.url}${EVENTS}?transactionId=${body.transactionId}`, { key: ADMIN_KEY })
          out.push(stored.body._embedded.toolEventMetricResourceList[0].cost.total)
        }
        return out
      }
      t.same(await costs(), ['0.25', '0.25', '0.25'], 'the price set on one replica')
      const changed = await call(`${b.url}${API}/tools/${created.body.id}`, { method: 'PUT', key: ADMIN_KEY, body: { pricing: { currency: 'USD', elements: [{ name: 'calls', aggregationType: 'COUNT', tiersMode: 'volume', unitPrice: '0.4', tiers: [] }] } } })
      t.equal(changed.status, 200, changed.text)
      for (const m of [a, c.replicas[2]]) {
        const ms = await within(5000, async () => (await call(`${m.url}${API}/tools/${created.body.id}`, { key: ADMIN_KEY })).body?.revision === 2)
        t.ok(ms <= PROPAGATION_BOUND_MS, `the change is seen by another replica after ${ms.toFixed(1)} ms`)
      }
      t.same(await costs(), ['0.4', '0.4', '0.4'], 'the new price everywhere')
    })

    await t.test('an export configuration made on one replica delivers each event once, whichever replica stored it', async (t) => {
      const rx = await startReceiver(t)
      const made = await call(`${c.replicas[2].url}${API}/export-configurations`, { key: ADMIN_KEY, body: { name: 'cluster', url: rx.url, eventTypes: ['usage.completion'] } })
      t.equal(made.status, 201, made.text)
      for (const m of [a, b]) await within(5000, async () => (await call(`${m.url}${API}/export-configurations/${made.body.id}`, { key: ADMIN_KEY })).status === 200)
      const sent: string[] = []
      await Promise.all(
        Array.from({ length: 30 }, async (_, i) => {
          const r = await call(c.replicas[i % 3].url + POST_COMPLETION, { key: ADMIN_KEY, body: completion() })
          if (r.status === 201) sent.push(r.body.id)
        }),
      )
      t.equal(sent.length, 30)
      await rx.waitFor(30, 10_000)
      await new Promise((r) => setTimeout(r, 500)) // room for a second delivery, if any were to come
      const events = rx.received.map((r) => r.json.id)
      t.equal(events.length, 30, 'thirty deliveries')
      t.equal(new Set(events).size, 30, 'one per event')
      // Removed on another replica: no replica delivers any more.
      t.equal((await call(`${a.url}${API}/export-configurations/${made.body.id}`, { method: 'DELETE', key: ADMIN_KEY })).status, 204)
      for (const m of [b, c.replicas[2]]) await within(5000, async () => (await call(`${m.url}${API}/export-configurations/${made.body.id}`, { key: ADMIN_KEY })).status === 404)
      await Promise.all(c.replicas.map((m) => call(m.url + POST_COMPLETION, { key: ADMIN_KEY, body: completion() })))
      await new Promise((r) => setTimeout(r, 500))
      t.equal(rx.received.length, 30, 'nothing delivered after the removal')
    })

    await t.test('an alert rule made on one replica is listed by the others', async (t) => {
      const made = await call(`${b.url}${API}/sources/ai/anomaly`, { key: ADMIN_KEY, body: cliRule({ name: 'cluster rule' }) })
      t.equal(made.status, 201, made.text)
      for (const m of [c.replicas[0], c.replicas[2]]) {
        const ms = await within(5000, async () => (await call(`${m.url}${API}/sources/ai/anomaly/${made.body.id}`, { key: ADMIN_KEY })).status === 200)
        t.ok(ms <= PROPAGATION_BOUND_MS, `seen after ${ms.toFixed(1)} ms`)
      }
    })

    await t.test('one replica killed mid-load loses nothing acknowledged', async (t) => {
      const acked = new Map<string, string>() // transactionId → id answered
      const victim = 2
      let killed = false
      let inFlightOnVictim = 0
      const send = async (body: Record<string, unknown>, first: number): Promise<void> => {
        // A load balancer's retry: the next replica that answers, the same body.
        for (let attempt = 0; attempt < 20; attempt++) {
          const i = (first + attempt) % 3
          const m = c.replicas[i]
          if (killed && i === victim) continue
          if (i === victim) inFlightOnVictim++
          let r: Res | undefined
          try {
            r = await call(m.url + POST_COMPLETION, { key: ADMIN_KEY, body })
          } catch {
            r = undefined
          } finally {
            if (i === victim) inFlightOnVictim--
          }
          if (r?.status === 201) {
            acked.set(body.transactionId as string, r.body.id)
            return
          }
          await new Promise((res) => setTimeout(res, 100))
        }
        throw new Error('never acknowledged')
      }
      let n = 0
      const load = Promise.all(
        Array.from({ length: 24 }, async (_, w) => {
          const stopAt = Date.now() + 3000
          while (Date.now() < stopAt) await send(completion(), (n++ + w) % 3)
        }),
      )
      await new Promise((r) => setTimeout(r, 1000))
      const atKill = inFlightOnVictim
      await c.replicas[victim].stop('SIGKILL')
      killed = true
      await load
      t.ok(acked.size > 100, `${acked.size} records acknowledged`)
      await c.start(victim)
      let missing = 0
      let wrongId = 0
      let twins = 0
      for (const [tx, id] of acked) {
        const stored = (await storedUnder(c, 'completion', tx)).flat()
        if (!stored.includes(id)) missing++
        if (stored.length > 1) twins++
        if (stored.some((s) => s !== id)) wrongId++
      }
      t.equal(missing, 0, 'every acknowledged record is stored, under the id answered')
      // A record committed by the victim in the instant before SIGKILL, unanswered, may be stored
      // again by the retry once its claim expires (docs/deployment.md): at most the requests then in flight.
      t.ok(twins <= atKill, `twins (${twins}) only among the ${atKill} requests in flight on the killed replica`)
      t.ok(wrongId <= atKill, 'and nothing else')
    })

    await t.test('Redis stopped: 503 with Retry-After where correctness needs it, and no double count', async (t) => {
      // A graduated tool (needs the shared tier quantities) and a transactionId (needs the shared dedup).
      await c.redis.stop()
      const body = completion()
      for (const m of c.replicas) {
        const r = await call(m.url + POST_COMPLETION, { key: ADMIN_KEY, body })
        t.equal(r.status, 503, `a completion with a transactionId: ${r.text}`)
        t.equal(r.headers.get('retry-after'), '1', 'with Retry-After')
        t.equal(r.body?.error?.code, 'shared_state_unavailable')
        const tool = await call(m.url + POST_TOOL_EVENT, { key: ADMIN_KEY, body: event('cluster-tiers', { transactionId: undefined, usageMetadata: { units: 5 } }) })
        t.equal(tool.status, 503, `a tool event priced by tier quantities: ${tool.text}`)
        t.ok(tool.headers.get('retry-after'), 'with Retry-After')
      }
      t.same((await storedUnder(c, 'completion', body.transactionId as string)).flat(), [], 'nothing stored')
      t.equal((await toolRecords(c, 'cluster-tiers')).length, 300, 'no tool event stored either')
      // Changes of the shared tables are refused too: kept by one replica alone they would price
      // and authenticate differently per replica, and be lost if it restarted before Redis came back.
      const refusedWrites: [string, () => Promise<Res>][] = [
        ['a tool', () => call(`${a.url}${API}/tools`, { key: ADMIN_KEY, body: toolBody('made-offline', { name: 'calls', aggregationType: 'COUNT', tiersMode: 'volume', unitPrice: '0.5', tiers: [] }) })],
        ['an alert rule', () => call(`${b.url}${API}/sources/ai/anomaly`, { key: ADMIN_KEY, body: cliRule({ name: 'made offline' }) })],
        ['an export configuration', () => call(`${a.url}${API}/export-configurations`, { key: ADMIN_KEY, body: { name: 'made offline', url: 'http://127.0.0.1:9/x', eventTypes: ['usage.completion'] } })],
      ]
      for (const [what, write] of refusedWrites) {
        const r = await write()
        t.equal(r.status, 503, `${what} created while Redis is down: ${r.text}`)
        t.equal(r.headers.get('retry-after'), '1', 'with Retry-After')
        t.match(r.body, { error: { type: 'api_error', code: 'shared_state_unavailable' } }, 'in the error shape')
      }
      const key = await cli(c, 0, ['keys', 'create', '--team', 'offline-team', '--scopes', 'metering:write', '--json'])
      t.not(key.code, 0, 'meterd keys create fails while Redis is down')
      t.match(key.stderr, /Redis\) is unreachable/, `and says why: ${key.stderr.trim().split("\n").pop()}`)

      // Redis back (empty: it keeps nothing on disk here): the cluster serves again.
      const back = await startRedis(c.redis.port)
      t.teardown(() => back.stop())
      // Each replica's client reconnects on its own back-off: wait for every one (the same record
      // each time, so whichever answers first stores it and the others answer from the dedup entry).
      await Promise.all(c.replicas.map((m) => within(10_000, async () => (await call(m.url + POST_COMPLETION, { key: ADMIN_KEY, body })).status === 201)))
      const answers = await Promise.all(c.replicas.map((m) => call(m.url + POST_COMPLETION, { key: ADMIN_KEY, body })))
      t.same(
        answers.map((r) => r.status),
        [201, 201, 201],
        'served again once Redis is back',
      )
      t.equal((await storedUnder(c, 'completion', body.transactionId as string)).flat().length, 1, 'and stored once')
      // Nothing refused shows up later on any replica (resync_seconds is 60 here: give pub/sub and
      // the reconnect resync their time).
      await new Promise((r) => setTimeout(r, 1000))
      for (const m of c.replicas) {
        t.notOk((await call(`${m.url}${API}/tools`, { key: ADMIN_KEY })).text.includes('"toolId":"made-offline"'), 'the refused tool exists nowhere')
        t.notOk((await call(`${m.url}${API}/sources/ai/anomaly`, { key: ADMIN_KEY })).text.includes('made offline'), 'nor the refused rule')
        t.notOk((await call(`${m.url}${API}/export-configurations`, { key: ADMIN_KEY })).text.includes('made offline'), 'nor the refused configuration')
      }
      t.notOk((await cli(c, 1, ['keys', 'list'])).stdout.includes('offline-team'), 'nor the refused key')
      const again = await call(`${a.url}${API}/tools`, { key: ADMIN_KEY, body: toolBody('made-offline', { name: 'calls', aggregationType: 'COUNT', tiersMode: 'volume', unitPrice: '0.5', tiers: [] }) })
      t.equal(again.status, 201, `the retry once Redis is back is made: ${again.text}`)
      const listed = async () => (await call(`${c.replicas[2].url}${API}/tools`, { key: ADMIN_KEY })).text.includes('"toolId":"made-offline"')
      const ms = await within(5000, listed)
      t.ok(ms <= PROPAGATION_BOUND_MS, `and on another replica after ${ms.toFixed(1)} ms`)
    })
  })
}
