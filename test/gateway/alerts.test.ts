/**
 * Alert rules in a gateway cluster of three replicas on one real redis-server: every replica
 * measures its own records, the one replica holding the cluster lease judges each rule on all
 * of them, so a rule fires once for the cluster (and on the cluster's records, not one
 * replica's); when that replica dies, another takes the lease within the bound
 * docs/deployment.md states and goes on from the shared state.
 */
import t from 'tap'
import { cliRule, costing } from '../helpers/alerts.js'
import { startGatewayCluster } from '../helpers/gateway.js'
import { ADMIN_KEY, call, type ChildMeterd } from '../helpers/meterd.js'
import { haveRedis } from '../helpers/redis-server.js'
import { startReceiver } from '../helpers/webhook-receiver.js'

const API = '/profitstream/v2/api'
const LEASE_S = 1
/** The stated bound: the lease runs out, and another replica takes it at its next try (a third of the lease). */
const TAKEOVER_MS = (LEASE_S * 1000 * 4) / 3

async function leaderGauge(m: ChildMeterd): Promise<number> {
  const text = (await call(m.url + '/metrics')).text
  const line = text.split('\n').find((l) => l.startsWith('meterd_cluster_leader '))
  return Number(line?.split(' ')[1] ?? NaN)
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

if (!haveRedis) {
  t.skip('redis-server is not installed (apt-get install redis-server)')
} else {
  t.setTimeout(180_000)
  t.test('alerts in a gateway cluster: judged once, on every replica\'s records, by the lease holder; another takes over when it dies', async (t) => {
    const { replicas } = await startGatewayCluster(t, {
      redis: { leader_lease_seconds: LEASE_S },
      extensions: { alerts: { evaluation_interval_seconds: 0.2 } },
    })

    const rx = await startReceiver(t)
    const made = await call(`${replicas[0].url}${API}/export-configurations`, { key: ADMIN_KEY, body: { name: 'alerts', url: rx.url, eventTypes: ['alert.triggered', 'alert.resolved'] } })
    t.equal(made.status, 201, made.text)
    const events = () => rx.received.flatMap((r) => (Array.isArray(r.json) ? r.json : [r.json])) as { type: string; data: { ruleId: string; value: string } }[]
    const firedFor = (ruleId: string) => events().filter((e) => e.type === 'alert.triggered' && e.data.ruleId === ruleId)

    // One lease holder.
    await sleep(LEASE_S * 1000)
    const gauges = await Promise.all(replicas.map(leaderGauge))
    t.same(gauges.slice().sort(), [0, 0, 1], `one replica leads (${gauges.join(', ')})`)

    // 10 USD on each replica: 30 for the cluster, no replica alone above 25.
    for (const m of replicas) t.equal((await call(m.url + '/meter/v2/ai/completions', { key: ADMIN_KEY, body: costing(10, Date.now()) })).status, 201)
    const rule = await call(`${replicas[1].url}${API}/sources/ai/anomaly`, { key: ADMIN_KEY, body: cliRule({ name: 'cluster spend', threshold: 25 }) })
    t.equal(rule.status, 201, rule.text)
    await rx.waitFor(1, 10_000)
    await sleep(1500) // room for a second firing, if any were to come
    const fired = firedFor(rule.body.id)
    t.equal(fired.length, 1, 'the rule fires once for the cluster')
    t.equal(Number(fired[0]?.data.value), 30, "on the three replicas' records together")
    for (const m of replicas) {
      const shown = await call(`${m.url}${API}/sources/ai/anomaly/${rule.body.id}`, { key: ADMIN_KEY })
      t.equal(shown.body?.firing, true, 'every replica shows it firing')
    }

    // The leader dies: another replica takes the lease within the stated bound.
    const leader = gauges.indexOf(1)
    await replicas[leader].stop('SIGKILL')
    const killedAt = performance.now()
    const survivors = replicas.filter((_, i) => i !== leader)
    let tookMs = NaN
    for (;;) {
      const now = await Promise.all(survivors.map(leaderGauge))
      if (now.includes(1)) {
        tookMs = performance.now() - killedAt
        t.same(now.slice().sort(), [0, 1], 'one survivor leads')
        break
      }
      if (performance.now() - killedAt > 10_000) break
      await sleep(20)
    }
    // The gauge is refreshed every 100 ms and polled every 20: allow for both.
    t.ok(tookMs <= TAKEOVER_MS + 150, `another replica leads ${tookMs.toFixed(0)} ms after the leader died (bound ${TAKEOVER_MS.toFixed(0)} ms)`)

    // The new leader goes on from the shared state (no second firing of the first rule) and judges new rules.
    const second = await call(`${survivors[0].url}${API}/sources/ai/anomaly`, { key: ADMIN_KEY, body: cliRule({ name: 'survivors spend', threshold: 15 }) })
    t.equal(second.status, 201, second.text)
    const until = Date.now() + 10_000
    while (firedFor(second.body.id).length === 0 && Date.now() < until) await sleep(50)
    await sleep(1500)
    t.equal(firedFor(second.body.id).length, 1, 'a rule made after the takeover fires once')
    t.equal(firedFor(rule.body.id).length, 1, 'the first rule did not fire again under the new leader')
  })
}
