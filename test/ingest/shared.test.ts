/**
 * The ingest module as the OTLP receiver will use it: two receivers (two Ingest instances) on one
 * store share what is in flight, so a retry that arrives on another transport while the first
 * attempt is being stored waits for it and answers its id, and a record is stored once.
 */
import t, { type Test } from 'tap'
import { unitOf, type Batch, type Consumer } from '../../src/core/consumer.js'
import { RetryableError } from '../../src/core/errors.js'
import { Ingest } from '../../src/domain/ingest/index.js'
import type { Caller, UsageRecord } from '../../src/model/usage-record.js'
import { Store } from '../../src/store/store.js'
import { removeDir, tempDir } from '../helpers/meterd.js'

const DAY = 86_400_000
const NOW = Date.UTC(2026, 10, 21, 12)
const caller: Caller = { account: 'acct-1', tenant: 't', team: 'team-a', environment: 'production', keyId: 'key_a' }
const metrics = { accepted() {}, refused() {}, failed() {} }

/** A durable exporter's write (the lmdb exporter's step), held until `open()`. */
function gatedPipeline(store: Store) {
  let open!: () => void
  let failNext = false
  const gate = new Promise<void>((r) => (open = r))
  const batches: Batch[] = []
  const consumer: Consumer<UsageRecord> = {
    async consume(batch) {
      batches.push(batch)
      await gate
      if (failNext) {
        failNext = false
        throw new RetryableError('the store is away')
      }
      const unit = unitOf(batch, store)
      unit.add(() => {
        const kept = store.usage.writeInTransaction(batch.items, { dedupWindowMs: DAY, now: NOW })
        if (kept.size > 0) batch.ctx.duplicates = kept
      })
      await unit.commit()
    },
  }
  return { consumer, open: () => open(), batches, failOnce: () => (failNext = true) }
}

function setup(t: Test) {
  const dir = tempDir('meterd-ingest-')
  const store = new Store({ path: dir })
  t.teardown(async () => {
    await store.close()
    removeDir(dir)
  })
  const pipe = gatedPipeline(store)
  const settings = (receiver: string) => ({ receiver, dedupWindowMs: DAY, idempotencyTtlMs: DAY, metrics, now: () => NOW })
  return { store, pipe, rest: new Ingest(store.usage, pipe.consumer, settings('metering')), otlp: new Ingest(store.usage, pipe.consumer, settings('otlp')) }
}

const item = (transactionId?: string, extra: Record<string, unknown> = {}) => ({ kind: 'completion' as const, body: { transactionId, model: 'm', ...extra } })

t.test('a record in flight on one receiver is waited on by the other; each is stored once', async (t) => {
  const { store, pipe, rest, otlp } = setup(t)
  const first = rest.submit(caller, [item('tx-1')])
  const retry = otlp.submit(caller, [item('tx-1'), item('tx-2'), item()])
  await new Promise((r) => setImmediate(r))
  t.equal(pipe.batches.length, 2, 'both requests reached the pipeline')
  t.same(pipe.batches[1].items.map((r) => r.body.transactionId), ['tx-2', undefined], 'the second without the record in flight')
  t.equal(pipe.batches[1].ctx.receiver, 'otlp')
  pipe.open()
  const [a, b] = await Promise.all([first, retry])
  t.equal(b.ids![0], a.ids![0], 'the retry answers the id the first attempt stored')
  t.equal(new Set(b.ids).size, 3)
  t.equal(store.usage.findDuplicate('team-a', 'completion', 'tx-1', DAY, NOW), a.ids![0])
  t.equal(store.usage.records.getCount(), 3, 'three records stored, not four')

  const later = await otlp.submit(caller, [item('tx-2')])
  t.same(later.ids, [b.ids![1]], 'a later retry is answered from the store')
  const otherTeam = await otlp.submit({ ...caller, team: 'team-b' }, [item('tx-1')])
  t.not(otherTeam.ids![0], a.ids![0], 'another team’s tx-1 is its own record')
})

t.test('when the first attempt fails, the one waiting on it fails too, and nothing is stored', async (t) => {
  const { store, pipe, rest, otlp } = setup(t)
  pipe.failOnce()
  const first = rest.submit(caller, [item('tx-9')])
  const retry = otlp.submit(caller, [item('tx-9')])
  pipe.open()
  await t.rejects(first, { kind: 'retryable' })
  await t.rejects(retry, { kind: 'retryable' }, 'the waiter is told to retry; it never answers an id that was not stored')
  t.equal(store.usage.records.getCount(), 0)
  const again = await otlp.submit(caller, [item('tx-9')])
  t.equal(again.ids!.length, 1, 'and the next attempt stores it')
  t.equal(store.usage.records.getCount(), 1)
})

t.test('identity and identifiers are checked before the store or the pipeline sees anything', async (t) => {
  const { pipe, otlp } = setup(t)
  await t.rejects(otlp.submit(caller, [item('x'.repeat(300))]), { code: 'invalid_field', param: 'transactionId' })
  await t.rejects(otlp.submit(caller, [item('ok'), item('ok2', { teamId: 'team-z' })]), { status: 403, code: 'team_mismatch', param: '[1].teamId' })
  t.equal(pipe.batches.length, 0)
})
