import t from 'tap'
import type { Meterd } from '../helpers/meterd.js'
import { call, startMeterd } from '../helpers/meterd.js'
import { completion } from '../fixtures/wire-examples.js'
import { api, startReceiver, startWebhookMeterd } from '../helpers/webhook-receiver.js'

const C = '/meter/v2/ai/completions'
const LIST = '/profitstream/v2/api/sources/metrics/ai/completions'

/**
 * The receiver checks the dedup table before the pipeline runs, and the store checks it again
 * inside the commit. Between the two, another process on the same data directory may store the
 * same transactionId. This makes the receiver's check miss, as it would in that window, so only
 * the store's check sees the record.
 */
function missNextCheck(m: Meterd): void {
  const usage = m.service.store.usage
  const real = usage.findDuplicate.bind(usage)
  usage.findDuplicate = () => {
    usage.findDuplicate = real
    return undefined
  }
}

t.test('a duplicate found only at commit is answered with the id that was stored, and replays so', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const body = completion({ transactionId: 'race-tx-1' })
  const first = await call(m.url + C, { key, body })
  t.equal(first.status, 201)

  missNextCheck(m)
  const headers = { 'idempotency-key': 'race-key-1' }
  const retry = await call(m.url + C, { key, body, headers })
  t.equal(retry.status, 201)
  t.equal(retry.body.id, first.body.id, 'the 201 carries the stored id, not one that was never stored')

  const list = await call(`${m.url}${LIST}?transactionId=race-tx-1`, { key })
  t.equal(list.body.page.totalElements, 1, 'stored once')
  t.equal(list.body._embedded.aICompletionMetricResourceList[0].id, first.body.id)

  const replay = await call(m.url + C, { key, body, headers })
  t.equal(replay.headers.get('idempotent-replayed'), 'true')
  t.equal(replay.body.id, first.body.id, 'the Idempotency-Key replay carries the stored id too')
})

t.test('in a batch, only the duplicate takes the stored id; the rest are stored under their own', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const first = await call(m.url + C, { key, body: completion({ transactionId: 'race-tx-2' }) })
  t.equal(first.status, 201)

  missNextCheck(m)
  const batch = [completion({ transactionId: 'race-tx-2' }), completion({ transactionId: 'race-tx-3' }), completion({ transactionId: 'race-tx-2' })]
  const res = await call(m.url + C, { key, body: batch })
  t.equal(res.status, 201)
  const [dup, fresh, twin] = res.body.map((a: { id: string }) => a.id)
  t.equal(dup, first.body.id, 'the duplicate answers with the stored id')
  t.equal(twin, first.body.id, 'its repeat within the batch too')
  t.not(fresh, first.body.id)

  const stored = await call(`${m.url}${LIST}?transactionId=race-tx-3`, { key })
  t.equal(stored.body._embedded.aICompletionMetricResourceList[0].id, fresh, 'the new record is stored under the id it was answered with')
  const dupList = await call(`${m.url}${LIST}?transactionId=race-tx-2`, { key })
  t.equal(dupList.body.page.totalElements, 1, 'the duplicate was not stored again')
})

t.test('a duplicate found only at commit sends no second webhook event', async (t) => {
  const { m, engine } = await startWebhookMeterd(t)
  const rx = await startReceiver(t)
  const key = await m.key()
  t.equal((await call(api(m), { key, body: { name: 'usage', url: rx.url, eventTypes: ['usage.completion'] } })).status, 201)
  const body = completion({ transactionId: 'race-tx-4' })
  t.equal((await call(m.url + C, { key, body })).status, 201)
  missNextCheck(m)
  t.equal((await call(m.url + C, { key, body })).status, 201)
  await engine.settle()
  await rx.waitFor(1)
  await engine.settle()
  t.equal(rx.received.length, 1, 'one record stored, one event delivered')
})
