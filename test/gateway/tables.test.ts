/**
 * The shared tables between two replicas in this process (each its own LMDB, one real Redis):
 * another replica's change is shown before its local commit, in the order it was made, and the
 * local commit still follows.
 */
import { join } from 'node:path'
import t from 'tap'
import { ToolRegistry } from '../../src/domain/tools/registry.js'
import { removeDir, tempDir } from '../helpers/meterd.js'
import { toolBody } from '../helpers/pricing.js'
import { haveRedis, startRedis } from '../helpers/redis-server.js'
import { openReplica, within } from '../helpers/gateway.js'

const price = (p: string) => ({ pricing: { currency: 'USD', elements: [{ name: 'calls', aggregationType: 'COUNT', tiersMode: 'volume', unitPrice: p, tiers: [] }] } })

if (!haveRedis) {
  t.skip('redis-server is not installed (apt-get install redis-server); the gateway tests need a real one')
} else {
  t.test('a replica shows another\'s changes in the order they were made, then commits them', async (t) => {
    const redis = await startRedis()
    t.teardown(() => redis.stop())
    const dir = tempDir('meterd-tables-')
    t.teardown(() => removeDir(dir))
    const replica = async (name: string) => {
      // resync_seconds far apart: the test runs the resyncs itself, amid the messages.
      const { store, shared } = await openReplica(t, join(dir, name), redis.url)
      const tools = new ToolRegistry(store)
      await tools.share(shared.tables)
      return { store, tools, tables: shared.tables as unknown as { resyncAll(): Promise<void> } }
    }
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
}
