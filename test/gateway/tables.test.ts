/**
 * The shared tables between two replicas in this process (each its own LMDB, one real Redis):
 * another replica's change is shown before its local commit, in the order it was made, and the
 * local commit still follows.
 */
import { join } from 'node:path'
import { Redis } from 'ioredis'
import t from 'tap'
import { AlertStore } from '../../src/domain/alerts/store.js'
import { ToolRegistry } from '../../src/domain/tools/registry.js'
import { ExportConfigStore } from '../../src/extensions/exportconfigs/store.js'
import { SecretBox } from '../../src/extensions/exportconfigs/secrets.js'
import { removeDir, tempDir } from '../helpers/meterd.js'
import { toolBody } from '../helpers/pricing.js'
import { haveRedis, startRedis } from '../helpers/redis-server.js'
import { openReplica, within } from '../helpers/gateway.js'

const price = (p: string) => ({ pricing: { currency: 'USD', elements: [{ name: 'calls', aggregationType: 'COUNT', tiersMode: 'volume', unitPrice: p, tiers: [] }] } })

/** A replica's tool registry, shared through the Redis at `redisUrl`, with its store and shared tables. */
async function toolReplica(t: Parameters<typeof openReplica>[0], dataDir: string, redisUrl: string) {
  const { store, shared } = await openReplica(t, dataDir, redisUrl)
  const tools = new ToolRegistry(store)
  await tools.share(shared.tables)
  return { store, tools, tables: shared.tables as unknown as { resyncAll(): Promise<void> } }
}

/** A replica's export configurations and alert rules, shared through the Redis at `redisUrl`. */
async function configReplica(t: Parameters<typeof openReplica>[0], dataDir: string, redisUrl: string) {
  const { store, shared } = await openReplica(t, dataDir, redisUrl)
  const configs = new ExportConfigStore(store, new SecretBox('k'.repeat(32)))
  await configs.share(shared.tables)
  const alerts = new AlertStore(store)
  await alerts.share(shared.tables)
  return { configs, alerts }
}

if (!haveRedis) {
  t.skip('redis-server is not installed (apt-get install redis-server); the gateway tests need a real one')
} else {
  t.test('a replica shows another\'s changes in the order they were made, then commits them', async (t) => {
    const redis = await startRedis()
    t.teardown(() => redis.stop())
    const dir = tempDir('meterd-tables-')
    t.teardown(() => removeDir(dir))
    // resync_seconds far apart: the test runs the resyncs itself, amid the messages.
    const replica = (name: string) => toolReplica(t, join(dir, name), redis.url)
    const x = await replica('x')
    const y = await replica('y')

    const made = await x.tools.create('team', toolBody('ordered', price('0.1').pricing.elements[0]), Date.now())
    await within(5000, async () => y.tools.get('team', made.id)?.revision === 1)

    // Y's view, sampled every turn of its event loop while X changes the tool 40 times and Y
    // re-reads the whole table from Redis again and again (a resync's read races the messages).
    const seen: number[] = []
    let sampling = true
    const sample = () => {
      seen.push(y.tools.get('team', made.id)?.revision ?? 0)
      if (sampling) setImmediate(sample)
    }
    sample()
    let resyncing = true
    const resyncs = (async () => {
      while (resyncing) await y.tables.resyncAll()
    })()
    for (let i = 0; i < 40; i++) await x.tools.update('team', made.id, price(`0.${i + 2}`), Date.now())
    const last = 41
    await within(5000, async () => y.tools.get('team', made.id)?.revision === last)
    resyncing = false
    await resyncs
    sampling = false

    const backwards = seen.findIndex((r, i) => i > 0 && r < seen[i - 1])
    t.equal(backwards, -1, `never an older revision after a newer one (${seen.length} samples, ${new Set(seen).size} revisions seen)`)
    t.equal(y.tools.byToolId('team', 'ordered')?.pricing.elements[0].unitPrice, '0.41', 'the last price prices')
    // The mirror: Y's own LMDB holds the last revision once its commits are done (what a restart reads).
    const lmdb = y.store.db<any, any>('tools')
    await within(5000, async () => lmdb.get(['team', made.id])?.revision === last)
    t.pass('Y\'s LMDB holds the last revision')
  })

  t.test('two replicas changing one export configuration or alert rule at once: the later is merged over the earlier', async (t) => {
    const redis = await startRedis()
    t.teardown(() => redis.stop())
    const dir = tempDir('meterd-tables-')
    t.teardown(() => removeDir(dir))
    const replica = (name: string) => configReplica(t, join(dir, name), redis.url)
    const x = await replica('x')
    const y = await replica('y')
    const at = new Date().toISOString()
    const config = { id: 'exp_1', team: 'team', name: 'hook', url: 'https://example.com/hook', enabled: true, eventTypes: ['usage.completion' as const], filters: {}, batching: null, timeoutMs: null, createdAt: at, updatedAt: at }
    await x.configs.create(config, false, Date.now())
    const rule = { id: 'rule01', team: 'team', name: 'r', description: '', alertType: 'THRESHOLD', metricType: 'TOTAL_COST', operatorType: 'GREATER_THAN', threshold: '100', periodDuration: 'DAILY', windowSeconds: null, budgetThreshold: null, currency: null, filters: [], notificationAddresses: [], slackConfigurations: [], webhookConfigurations: [], enabled: true, createdAt: at, updatedAt: at } as any
    await x.alerts.put(rule)
    await within(5000, async () => y.configs.get('exp_1') !== undefined && y.alerts.get('rule01') !== undefined)

    // Each replica changes a field of the row as it reads it, at the same moment: both read the
    // same row, so without a check against what the cluster holds the later would undo the earlier.
    const cx = x.configs.get('exp_1')!
    const cy = y.configs.get('exp_1')!
    const [dx, dy] = await Promise.all([x.configs.update({ ...cx, name: 'renamed' }, cx), y.configs.update({ ...cy, timeoutMs: 5000 }, cy)])
    t.same([dx.outcome, dy.outcome].sort(), ['changed', 'replaced'], 'one change stands, the other is told the row changed')
    if (dx.outcome === dy.outcome) return
    const loser = dx.outcome === 'changed' ? { store: x.configs, done: dx, change: { name: 'renamed' } } : { store: y.configs, done: dy, change: { timeoutMs: 5000 } }
    const now = (loser.done as { now: typeof cx }).now
    t.equal((await loser.store.update({ ...now, ...loser.change }, now)).outcome, 'replaced', 'merged over the row as it is now, it stands')
    for (const r of [x, y]) await within(5000, async () => r.configs.get('exp_1')?.name === 'renamed' && r.configs.get('exp_1')?.timeoutMs === 5000)
    t.pass('both changes hold on both replicas')

    const rx = x.alerts.get('rule01')!
    const ry = y.alerts.get('rule01')!
    const [ax, ay] = await Promise.all([x.alerts.update({ ...rx, name: 'renamed' }, rx), y.alerts.update({ ...ry, description: 'changed' }, ry)])
    t.same([ax.outcome, ay.outcome].sort(), ['changed', 'replaced'], 'the same for alert rules')

    // A change of a row another replica deleted is refused, and does not bring it back.
    const stale = x.configs.get('exp_1')!
    await y.configs.remove(y.configs.get('exp_1')!)
    t.equal((await x.configs.update({ ...stale, name: 'late' }, stale)).outcome, 'gone', 'a deletion on the other replica stands')
    await within(5000, async () => x.configs.get('exp_1') === undefined)
    t.pass('deleted on both')
  })

  t.test('two replicas changing one tool at once: both changes stand; one toolId created on both: one 201, one 409', async (t) => {
    const redis = await startRedis()
    t.teardown(() => redis.stop())
    const dir = tempDir('meterd-tables-')
    t.teardown(() => removeDir(dir))
    const replica = async (name: string) => (await toolReplica(t, join(dir, name), redis.url)).tools
    const x = await replica('x')
    const y = await replica('y')
    const made = await x.create('team', toolBody('both', price('0.1').pricing.elements[0]), Date.now())
    await within(5000, async () => y.get('team', made.id)?.revision === 1)

    // Each round, X and Y change a different field of the tool at the same moment, each over the
    // tool as it reads it: checked only against its own copy, one of the two would be undone.
    const ROUNDS = 20
    for (let i = 0; i < ROUNDS; i++) await Promise.all([x.update('team', made.id, { description: `d${i}` }, Date.now()), y.update('team', made.id, { version: `v${i}` }, Date.now())])
    const last = 1 + 2 * ROUNDS
    for (const [name, r] of [['X', x], ['Y', y]] as const) {
      await within(5000, async () => r.get('team', made.id)?.revision === last)
      t.match(r.get('team', made.id), { description: `d${ROUNDS - 1}`, version: `v${ROUNDS - 1}`, revision: last }, `${name} holds both last changes, and every PUT counted a revision`)
    }

    // A PUT and a DELETE at once: whichever lands second sees the other (a PUT never revives a deleted tool).
    const [put, del] = await Promise.allSettled([x.update('team', made.id, { description: 'late' }, Date.now()), y.remove('team', made.id, Date.now())])
    t.equal(del.status, 'fulfilled', 'the DELETE stands')
    if (put.status === 'rejected') t.match(put.reason, { status: 404 }, 'a PUT after it is a 404')
    for (const r of [x, y]) await within(5000, async () => r.get('team', made.id) === undefined && r.byToolId('team', 'both') === undefined)
    t.pass('deleted on both replicas')

    // The same toolId created on both at once, again and again: one of each pair is created, the
    // other is refused as a single process refuses it, and both replicas price by the one created.
    let created = 0
    let refused = 0
    for (let i = 0; i < 20; i++) {
      const toolId = `dup-${i}`
      const tries = await Promise.allSettled([x, y].map((r, n) => r.create('team', toolBody(toolId, price(`0.${n + 1}`).pricing.elements[0]), Date.now())))
      const ok = tries.filter((r): r is PromiseFulfilledResult<Awaited<ReturnType<ToolRegistry['create']>>> => r.status === 'fulfilled')
      const no = tries.filter((r): r is PromiseRejectedResult => r.status === 'rejected')
      created += ok.length
      refused += no.filter((r) => r.reason?.status === 409 && r.reason?.code === 'duplicate_tool_id').length
      if (ok.length !== 1) continue
      for (const r of [x, y]) await within(5000, async () => r.byToolId('team', toolId)?.id === ok[0].value.id)
    }
    t.equal(created, 20, 'one tool created per toolId')
    t.equal(refused, 20, 'the other creation refused with 409 duplicate_tool_id')

    // A toolId renamed on one replica to one just created on the other is refused too.
    const [a, b] = await Promise.allSettled([x.create('team', toolBody('taken', price('0.1').pricing.elements[0]), Date.now()), y.update('team', y.byToolId('team', 'dup-0')!.id, { toolId: 'taken' }, Date.now())])
    t.equal([a, b].filter((r) => r.status === 'fulfilled').length, 1, 'a create and a rename to one toolId at once: one stands')
    t.match([a, b].find((r) => r.status === 'rejected'), { reason: { status: 409, code: 'duplicate_tool_id' } }, 'the other is a 409')

    // Redis down: a tool change is refused (503 shared_state_unavailable), not kept by one replica alone.
    await redis.stop()
    const dup1 = x.byToolId('team', 'dup-1')!
    await t.rejects(x.update('team', dup1.id, { description: 'offline' }, Date.now()), { status: 503, code: 'shared_state_unavailable' })
    await t.rejects(x.create('team', toolBody('offline', price('0.1').pricing.elements[0]), Date.now()), { status: 503, code: 'shared_state_unavailable' })
    t.equal(x.get('team', dup1.id)?.description, dup1.description, 'the refused change is not shown either')
  })

  t.test('per-team limits hold across replicas under a burst of creations on both', async (t) => {
    const redis = await startRedis()
    t.teardown(() => redis.stop())
    const dir = tempDir('meterd-tables-')
    t.teardown(() => removeDir(dir))
    const replica = (name: string) => configReplica(t, join(dir, name), redis.url)
    const x = await replica('x')
    const y = await replica('y')
    const at = new Date().toISOString()
    let seq = 0
    const config = (team: string) => ({ id: `exp_${seq++}`, team, name: 'hook', url: 'https://example.com/hook', enabled: true, eventTypes: ['usage.completion' as const], filters: {}, batching: null, timeoutMs: null, createdAt: at, updatedAt: at })
    const rule = (team: string, store: AlertStore) => ({ id: store.newId(), team, name: 'r', description: '', alertType: 'THRESHOLD', metricType: 'TOTAL_COST', operatorType: 'GREATER_THAN', threshold: '100', periodDuration: 'DAILY', windowSeconds: null, budgetThreshold: null, currency: null, filters: [], notificationAddresses: [], slackConfigurations: [], webhookConfigurations: [], enabled: true, createdAt: at, updatedAt: at }) as any
    const MAX = 3
    // A burst: 10 creations on each replica at once, each replica's count seeing none of the other's yet.
    const burstConfigs = async (team: string) =>
      (await Promise.all([x, y].flatMap((r) => Array.from({ length: 10 }, (_, i) => r.configs.create(config(team), i % 2 === 0, Date.now(), MAX))))).filter((d) => d.created).length
    const burstRules = async (team: string) => (await Promise.all([x, y].flatMap((r) => Array.from({ length: 10 }, () => r.alerts.put(rule(team, r.alerts), MAX))))).filter(Boolean).length

    t.equal(await burstConfigs('team'), MAX, `${MAX} export configurations created of 20`)
    t.equal(await burstRules('team'), MAX, `${MAX} alert rules created of 20`)
    for (const r of [x, y]) await within(5000, async () => r.configs.forTeam('team').length === MAX && r.alerts.forTeam('team').length === MAX)
    t.pass('and both replicas hold that many')
    t.equal(await burstConfigs('other'), MAX, 'another team has its own count')

    // A removal (on either replica) makes room for exactly one more.
    await y.configs.remove(y.configs.forTeam('team')[0])
    await x.alerts.remove(x.alerts.forTeam('team')[0])
    t.equal(await burstConfigs('team'), 1, 'one export configuration after a removal')
    t.equal(await burstRules('team'), 1, 'one alert rule after a removal')

    // Counted from the table itself when Redis holds no count for a team (a cluster upgraded from a
    // version without one): the rows already there count.
    const raw = new Redis(redis.url)
    t.teardown(() => void raw.disconnect())
    t.equal(await raw.del('meterd:team:export_configurations:team', 'meterd:team:alert-rules:team'), 2, 'the counts dropped')
    t.equal(await burstConfigs('team'), 0, 'still no export configuration over the limit')
    t.equal(await burstRules('team'), 0, 'still no alert rule over the limit')
  })
}
