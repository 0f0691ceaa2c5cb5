// A tool event that two routes (match_once: false) send down two pipelines, each with a pricing
// processor, moves its period's tier quantities once: each copy is priced, both carry the one
// cost, and the period's events add up to C(total) (docs/routing.md, "A record in several
// pipelines"; docs/pricing.md).
import t from 'tap'
import type { ConsumingComponent } from '../../src/host/component.js'
import { RetryableError } from '../../src/core/errors.js'
import type { ExportConfigurations } from '../../src/extensions/exportconfigs/index.js'
import { ADMIN_KEY, call, startMeterd, type Meterd } from '../helpers/meterd.js'
import { API, EVENTS, TIERS, createTool, event, sum, toolBody } from '../helpers/pricing.js'
import { haveRedis, startRedis } from '../helpers/redis-server.js'
import { startReceiver, type Receiver } from '../helpers/webhook-receiver.js'

const POST = '/meter/v2/tool/events'
/** AcmeOrg's records go to usage/a, every tool event to usage/b: an AcmeOrg tool event to both. */
const TABLE = [
  { condition: 'organizationName == "AcmeOrg"', pipelines: ['usage/a'] },
  { condition: 'kind == "tool"', pipelines: ['usage/b'] },
]
const HEAD = { receivers: ['metering', 'genai'], processors: ['validate', 'attribution'], exporters: ['routing'] }

interface Setup {
  /** The pricing processors of usage/a and usage/b. */
  pricing: [string, string]
  redisUrl?: string
  /** usage/b's exporters; usage/a ends in lmdb alone. */
  exportersB?: string[]
}

async function start(t: Tap.Test, s: Setup): Promise<{ m: Meterd; hook: Receiver }> {
  const m = await startMeterd(t, {
    config: {
      ...(s.redisUrl ? { server: { shared_state: { backend: 'redis', redis: { url: s.redisUrl } } } } : {}),
      connectors: { routing: { match_once: false, table: TABLE } },
      processors: Object.fromEntries(s.pricing.map((id) => [id, {}])),
      extensions: { exportconfigs: { allow_private_destinations: ['127.0.0.1'], poll_interval_ms: 3_600_000, master_key: 'shared-pricing-test-master-key-0123456789' } },
      exporters: { debug: {} },
      service: {
        extensions: ['apikeys', 'exportconfigs', 'tools'],
        pipelines: {
          usage: HEAD,
          // usage/b's copies are delivered by the webhook too: what the webhook carries is usage/b's price.
          'usage/a': { receivers: ['routing'], processors: [s.pricing[0]], exporters: ['lmdb'] },
          'usage/b': { receivers: ['routing'], processors: [s.pricing[1]], exporters: s.exportersB ?? ['lmdb', 'webhook', 'debug'] },
        },
      },
    },
  })
  const hook = await startReceiver(t)
  const made = await call(`${m.url}${API}/export-configurations`, { key: ADMIN_KEY, body: { name: 'main', url: hook.url, eventTypes: ['usage.tool'] } })
  if (made.status !== 201) t.fail(`export configuration: ${made.status} ${made.text}`)
  return { m, hook }
}

/** Every stored tool event of `toolId`, by transactionId. */
async function storedEvents(m: Meterd, toolId: string): Promise<Map<string, any>> {
  const res = await call(`${m.url}${EVENTS}?toolId=${toolId}&size=1000`, { key: ADMIN_KEY })
  const list = (res.body?._embedded?.toolEventMetricResourceList ?? []) as any[]
  return new Map(list.map((r) => [r.transactionId, r]))
}

async function post(t: Tap.Test, m: Meterd, body: unknown): Promise<void> {
  const res = await call(m.url + POST, { key: ADMIN_KEY, body })
  t.equal(res.status, 201, res.text.slice(0, 200))
}

const variants: { name: string; pricing: [string, string] }[] = [
  { name: 'the same pricing processor in both pipelines', pricing: ['pricing', 'pricing'] },
  { name: 'two differently named pricing processors', pricing: ['pricing/a', 'pricing/b'] },
]

async function priceOnce(t: Tap.Test, v: (typeof variants)[number], redisUrl?: string): Promise<void> {
  const { m, hook } = await start(t, { pricing: v.pricing, redisUrl })
  const toolId = `units-${v.pricing[0].replace('/', '-')}`
  await createTool(m, ADMIN_KEY, toolBody(toolId, { name: 'units', aggregationType: 'SUM', tiersMode: 'graduated', tiers: TIERS }))

  // Twelve events of 150 units, one at a time: 1,800 units, across the 1,000-unit tier limit.
  const bodies = Array.from({ length: 12 }, () => event(toolId, { usageMetadata: { units: 150 } }))
  for (const b of bodies) await post(t, m, b)
  const stored = await storedEvents(m, toolId)
  t.equal(stored.size, 12, 'each event stored once')
  const costs = bodies.map((b) => stored.get(b.transactionId as string)?.cost.total)
  // Six at 0.01 (900 units), the seventh crosses the limit (100 at 0.01, 50 at 0.008), five at 0.008.
  t.same(costs, ['1.5', '1.5', '1.5', '1.5', '1.5', '1.5', '1.4', '1.2', '1.2', '1.2', '1.2', '1.2'], 'each event priced in its own tier: the quantity moved once per event')
  t.equal(sum(costs), '16.4', "the period's costs add up to C(1800) = 1000 × 0.01 + 800 × 0.008")
  t.same(bodies.map((b) => stored.get(b.transactionId as string)?.cost.quantities), bodies.map(() => ({ units: '150' })), 'each counted its own 150 units')

  // A batch mixing events for both routes with one for usage/b only (another organization, its own
  // aggregate), and two batches in flight at once: 2,400 units in AcmeOrg's period.
  const beta = event(toolId, { organizationName: 'BetaOrg', usageMetadata: { units: 10 } })
  const batch = [event(toolId, { usageMetadata: { units: 100 } }), beta, event(toolId, { usageMetadata: { units: 200 } })]
  await post(t, m, batch)
  const inFlight = [[event(toolId, { usageMetadata: { units: 120 } })], [event(toolId, { usageMetadata: { units: 180 } })]]
  await Promise.all(inFlight.map((b) => post(t, m, b)))
  const all = await storedEvents(m, toolId)
  const acme = [...all.values()].filter((r) => r.transactionId !== beta.transactionId)
  t.equal(all.size, 17)
  t.equal(sum(acme.map((r) => r.cost.total)), '21.2', "AcmeOrg's period: C(2400) = 10 + 1400 × 0.008")
  t.equal(all.get(beta.transactionId as string)?.cost.total, '0.1', "BetaOrg's event went one way: 10 units at 0.01")

  // usage/b's copies reached the webhook: they carry the cost the stored record carries.
  const engine = m.service.getExtension<ExportConfigurations>('exportconfigs')!.engine!
  await engine.settle()
  await hook.waitFor(17)
  const delivered = hook.received.map((r) => (r.json as { data: any }).data)
  t.equal(delivered.length, 17)
  t.same(
    delivered.map((d) => [d.transactionId, d.cost]).sort(),
    [...all.values()].map((r) => [r.transactionId, r.cost]).sort(),
    "each copy carries the same cost as the stored record (usage/a's or usage/b's, whichever was stored)",
  )
}

for (const v of variants) t.test(`${v.name}: each tool event moves its tier once`, (t) => priceOnce(t, v))

t.test('gateway (Redis tier quantities)', async (t) => {
  if (!haveRedis) return t.fail('redis-server is not installed (apt-get install redis-server)')
  for (const v of variants) {
    await t.test(`${v.name}: each tool event moves its tier once`, async (t) => {
      const redis = await startRedis()
      t.teardown(() => redis.stop())
      await priceOnce(t, v, redis.url)
    })
  }

  await t.test('a request that fails after pricing gives each move back once: the retry is priced as if it never failed', async (t) => {
    const redis = await startRedis()
    t.teardown(() => redis.stop())
    const { m } = await start(t, { pricing: ['pricing', 'pricing'], redisUrl: redis.url, exportersB: ['lmdb'] })
    await createTool(m, ADMIN_KEY, toolBody('gb', { name: 'units', aggregationType: 'SUM', tiersMode: 'graduated', tiers: TIERS }))
    await post(t, m, event('gb', { usageMetadata: { units: 900 } }))
    // The shared lmdb exporter fails once, on the first copy to reach it, before anything of the
    // request is stored: 503. The other copy was passed over (takeOnce): its pipeline succeeded.
    const lmdb = m.service.component<ConsumingComponent>('exporter', 'lmdb')!.consumers.usage!
    const consume = lmdb.consume
    lmdb.consume = async () => {
      lmdb.consume = consume
      throw new RetryableError('down for a moment')
    }
    const body = [event('gb', { usageMetadata: { units: 200 } }), event('gb', { usageMetadata: { units: 50 } })]
    const failed = await call(m.url + POST, { key: ADMIN_KEY, body })
    t.equal(failed.status, 503, failed.text.slice(0, 200))
    await post(t, m, body)
    const stored = await storedEvents(m, 'gb')
    t.same(
      body.map((b) => stored.get(b.transactionId as string)?.cost.total),
      ['1.8', '0.4'],
      '900 units were counted before: 100 at 0.01 and 100 at 0.008, then 50 at 0.008, as if the failed attempt never counted',
    )
    t.equal(sum([...stored.values()].map((r) => r.cost.total)), '11.2', 'C(1150) = 10 + 150 × 0.008')
  })
})
