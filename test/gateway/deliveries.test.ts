/**
 * Webhook deliveries in a gateway cluster: two replicas (in-process daemons on one real
 * redis-server) that both queued the same event for the same endpoint send it once — the
 * delivery that loses the cluster's claim is settled unsent, with the reason.
 */
import t from 'tap'
import type { ExportConfigurations } from '../../src/extensions/exportconfigs/index.js'
import { ADMIN_KEY, call, startMeterd, type Meterd } from '../helpers/meterd.js'
import { haveRedis, startRedis } from '../helpers/redis-server.js'
import { startReceiver } from '../helpers/webhook-receiver.js'

const API = '/profitstream/v2/api/export-configurations'

async function replica(t: Parameters<typeof startMeterd>[0], url: string): Promise<{ m: Meterd; ext: ExportConfigurations }> {
  const m = await startMeterd(t, {
    config: {
      server: { shared_state: { backend: 'redis', redis: { url } } },
      extensions: {
        apikeys: { bootstrap_key: ADMIN_KEY },
        exportconfigs: { allow_private_destinations: ['127.0.0.1'], poll_interval_ms: 3_600_000, master_key: 'deliveries-test-master-key-0123456789' },
      },
      service: { extensions: ['apikeys', 'exportconfigs'] },
    },
  })
  return { m, ext: m.service.getExtension<ExportConfigurations>('exportconfigs')! }
}

if (!haveRedis) {
  t.skip('redis-server is not installed (apt-get install redis-server)')
} else {
  t.test('the same event queued on two replicas for one endpoint is delivered once', async (t) => {
    const redis = await startRedis()
    t.teardown(() => redis.stop())
    const rx = await startReceiver(t)
    const a = await replica(t, redis.url)
    const b = await replica(t, redis.url)

    const made = await call(a.m.url + API, { key: ADMIN_KEY, body: { name: 'twin', url: rx.url, eventTypes: ['usage.completion'] } })
    t.equal(made.status, 201, made.text)
    const id = made.body.id as string
    for (let i = 0; i < 200 && !b.ext.store!.get(id); i++) await new Promise((r) => setTimeout(r, 10))
    t.ok(b.ext.store!.get(id), 'the configuration reached the other replica')

    const event = { id: `evt_twin_${Date.now()}`, type: 'usage.completion' as const, created: new Date().toISOString(), teamId: 'default', data: { id: 'rec_1' } }
    const [da] = await a.ext.engine!.enqueue([{ config: a.ext.store!.get(id)!, event }], { direct: true })
    const [db] = await b.ext.engine!.enqueue([{ config: b.ext.store!.get(id)!, event }], { direct: true })
    await Promise.all([a.ext.engine!.settle(), b.ext.engine!.settle()])
    await new Promise((r) => setTimeout(r, 200))

    t.equal(rx.received.length, 1, 'the endpoint got the event once')
    t.equal(rx.received[0].json.id, event.id)
    const outcomes = [a.ext.engine!.queue.get(da.id)!, b.ext.engine!.queue.get(db.id)!]
    t.same(outcomes.map((d) => d.status).sort(), ['failed', 'succeeded'], 'one delivery sent, the other settled')
    const loser = outcomes.find((d) => d.status === 'failed')!
    t.equal(loser.attemptCount, 0, 'unsent')
    t.match(loser.lastError, /another replica/, 'and says why')
  })
}
