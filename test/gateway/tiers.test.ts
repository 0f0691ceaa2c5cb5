/**
 * The Redis tier quantities (src/store/redis/tiers.ts) against a real redis-server: three
 * adapters on three connections stand for three replicas pricing one scope at once. Whatever
 * the interleaving, each element's aggregate ends where the events take it, and the events'
 * costs add up to C(final quantity) exactly, for every aggregation type.
 */
import { Redis } from 'ioredis'
import { pino } from 'pino'
import t from 'tap'
import { quantityOf, type Aggregate } from '../../src/domain/pricing/aggregates.js'
import { Decimal, money } from '../../src/domain/pricing/money.js'
import { periodCharge } from '../../src/domain/pricing/tiers.js'
import type { PricingElement } from '../../src/model/pricing-element.js'
import type { ToolCharge } from '../../src/ports/tiers.js'
import { Outage } from '../../src/store/redis/connection.js'
import { RedisTierQuantities } from '../../src/store/redis/tiers.js'
import { haveRedis, startRedis } from '../helpers/redis-server.js'

const graduated = [
  { upTo: '100', unitPrice: '0.01' },
  { upTo: '1000', unitPrice: '0.008' },
  { upTo: null, unitPrice: '0.005' },
]
const ELEMENTS: PricingElement[] = [
  { name: 'units', unitPrice: '0', aggregationType: 'SUM', tiersMode: 'graduated', tiers: graduated },
  { name: 'calls', unitPrice: '0', aggregationType: 'COUNT', tiersMode: 'volume', tiers: graduated },
  { name: 'peak', unitPrice: '0.0003', aggregationType: 'MAXIMUM', tiersMode: 'volume', tiers: [] },
  { name: 'users', unitPrice: '0', aggregationType: 'DISTINCT', tiersMode: 'graduated', tiers: [{ upTo: '5', unitPrice: '1' }, { upTo: null, unitPrice: '0.5' }] },
  { name: 'latency', unitPrice: '0.000001', aggregationType: 'AVERAGE', tiersMode: 'volume', tiers: [] },
]

if (!haveRedis) {
  t.skip('redis-server is not installed (apt-get install redis-server)')
} else {
  t.test('three replicas moving one scope at once: exact aggregates, costs add up to C(q)', async (t) => {
    const server = await startRedis()
    t.teardown(() => server.stop())
    const logger = pino({ level: 'silent' })
    const connections = [0, 1, 2].map(() => new Redis(server.url))
    t.teardown(() => connections.forEach((c) => c.disconnect()))
    const outage = new Outage(logger, server.url, { inc() {} })
    const replicas = connections.map((c) => new RedisTierQuantities(c, 'test:', outage))

    const N = 600
    const charges: ToolCharge[] = Array.from({ length: N }, (_, i) => ({
      recordId: `r${i}`,
      scope: ['s', 'team', 'tool', '2026-11'],
      elements: ELEMENTS,
      usageMetadata: { units: (i % 13) + 0.25, peak: (i * 7919) % 1000, users: `u${i % 17}`, latency: (i % 50) * 1.5 },
    }))
    // Each replica applies its third, one charge per call, all at once.
    const applied = await Promise.all(
      charges.map((c, i) => replicas[i % 3].apply([c], 0).then(([a]) => a)),
    )

    const expected: Record<string, Decimal> = {
      units: charges.reduce((s, c) => s.plus(new Decimal(c.usageMetadata!.units as number)), new Decimal(0)),
      calls: new Decimal(N),
      peak: new Decimal(Math.max(...charges.map((c) => c.usageMetadata!.peak as number))),
      users: new Decimal(17),
    }
    for (const el of ELEMENTS) {
      const raw = await connections[0].hget(`test:agg:${JSON.stringify(['s', 'team', 'tool', '2026-11', el.name])}`, 'a')
      const agg = JSON.parse(raw!) as Aggregate
      t.equal(agg.n, N, `${el.name}: every event counted once`)
      const q = quantityOf(el, agg)
      if (expected[el.name]) t.equal(q.toFixed(), expected[el.name].toFixed(), `${el.name}: the final quantity`)
      const parts = applied.reduce((s, a) => s.plus(a.parts[el.name]), new Decimal(0))
      t.equal(money(parts), money(periodCharge(el, q)), `${el.name}: Σ costs = C(${q.toFixed()})`)
    }
  })

  t.test('Redis unreachable: apply rejects with the 503 shared_state_unavailable, and counts the failure', async (t) => {
    const server = await startRedis()
    const redis = new Redis(server.url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null })
    redis.on('error', () => {})
    t.teardown(() => redis.disconnect())
    await new Promise((r) => redis.once('ready', r))
    await server.stop()
    let failures = 0
    const q = new RedisTierQuantities(redis, 'test:', new Outage(pino({ level: 'silent' }), server.url, { inc: () => void failures++ }))
    const charge: ToolCharge = { recordId: 'x', scope: ['s'], elements: [ELEMENTS[0]], usageMetadata: { units: 3 } }
    await t.rejects(q.apply([charge], 0), { status: 503, code: 'shared_state_unavailable' })
    t.equal(failures, 1, 'the failure is counted')
  })

  t.test('giving back: exact when nobody moved the aggregate since; otherwise this request\'s own COUNT/SUM/AVERAGE share', async (t) => {
    const server = await startRedis()
    t.teardown(() => server.stop())
    const connections = [0, 1].map(() => new Redis(server.url))
    t.teardown(() => connections.forEach((c) => c.disconnect()))
    const outage = new Outage(pino({ level: 'silent' }), server.url, { inc() {} })
    const [one, two] = connections.map((c) => new RedisTierQuantities(c, 'gb:', outage))
    const read = async (scope: string[], el: PricingElement): Promise<Aggregate> =>
      JSON.parse((await connections[0].hget(`gb:agg:${JSON.stringify([...scope, el.name])}`, 'a'))!) as Aggregate
    const charge = (scope: string[], i: number, units: number): ToolCharge => ({ recordId: `r${i}`, scope, elements: ELEMENTS, usageMetadata: { units, peak: units * 10, users: `u${i}`, latency: units } })

    // Alone: a request of two events on one scope, given back, leaves the aggregates where it found them.
    const alone = ['alone']
    await one.apply([charge(alone, 0, 5)], 0)
    const before = await Promise.all(ELEMENTS.map((el) => read(alone, el)))
    const counted = await one.count([charge(alone, 1, 7), charge(alone, 2, 9)], 0)
    await counted.giveBack()
    t.same(await Promise.all(ELEMENTS.map((el) => read(alone, el))), before, 'every aggregate is back where the request found it')
    t.equal(await connections[0].sismember(`gb:aggd:${JSON.stringify([...alone, 'users'])}`, 'u1'), 0, "the request's DISTINCT value left the set")
    const again = await one.apply([charge(alone, 1, 7), charge(alone, 2, 9)], 0)
    t.same(again, counted.applied, 'the retry costs what the failed attempt was priced')

    // Another replica moved the scope meanwhile: only this request's contribution goes.
    const shared = ['shared']
    const failing = await one.count([charge(shared, 0, 7)], 0)
    await two.apply([charge(shared, 1, 2)], 0)
    await failing.giveBack()
    const units = await read(shared, ELEMENTS[0])
    t.equal(units.sum, '2', 'SUM: the other event only (its 2 units)')
    t.equal(units.n, 1, 'COUNT: one event')
    t.equal(units.nv, 1)
    t.equal((await read(shared, ELEMENTS[4])).sum, '2', 'AVERAGE: the other event only')
  })

  t.test('giving back some charges of a count (a record priced in several pipelines): theirs go, once; the others stay', async (t) => {
    const server = await startRedis()
    t.teardown(() => server.stop())
    const redis = new Redis(server.url)
    t.teardown(() => redis.disconnect())
    const q = new RedisTierQuantities(redis, 'part:', new Outage(pino({ level: 'silent' }), server.url, { inc() {} }))
    const scope = ['part']
    const sumOf = async (): Promise<Aggregate> => JSON.parse((await redis.hget(`part:agg:${JSON.stringify([...scope, 'units'])}`, 'a'))!) as Aggregate
    const charge = (i: number, units: number): ToolCharge => ({ recordId: `r${i}`, scope, elements: [ELEMENTS[0]], usageMetadata: { units } })
    await q.apply([charge(0, 1)], 0)
    const counted = await q.count([charge(1, 10), charge(2, 100), charge(3, 1000)], 0)
    // The first and the last: the middle one, set between them, stays counted.
    await counted.giveBack([0, 2])
    t.same([(await sumOf()).sum, (await sumOf()).n], ['101', 2], 'the first and last charges are given back; the middle one stays')
    await counted.giveBack([2])
    t.equal((await sumOf()).sum, '101', 'a move goes back once')
    await counted.giveBack()
    t.same([(await sumOf()).sum, (await sumOf()).n, (await sumOf()).nv], ['1', 1, 1], 'the rest: back to the event before the request')
  })
}
