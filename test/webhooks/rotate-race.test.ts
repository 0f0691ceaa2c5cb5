import t from 'tap'
import { call } from '../helpers/meterd.js'
import { together } from '../helpers/slow-write.js'
import { verifyWebhook } from '../../src/domain/webhooks/verify.js'
import { api, startReceiver, startWebhookMeterd } from '../helpers/webhook-receiver.js'

t.test('two rotations at once: both secrets answered 200 sign the next delivery (neither is lost)', async (t) => {
  const { m, engine } = await startWebhookMeterd(t)
  const rx = await startReceiver(t)
  const key = await m.key()
  const created = await call(api(m), { key, body: { name: 's', url: rx.url } })
  const id = created.body.id
  const rotation = { url: `${api(m)}/${id}/rotate-signing-secret`, key, method: 'POST', body: '{}' }
  const [a, b] = await together([rotation, rotation])
  t.equal(a.status, 200)
  t.equal(b.status, 200)
  t.equal((await call(`${api(m)}/${id}/send-test-event`, { key, body: {} })).status, 202)
  await engine.settle()
  const [got] = await rx.waitFor(1)
  for (const [name, res] of [['first', a], ['second', b]] as const)
    t.ok(verifyWebhook(got.body, got.headers, { secrets: res.body.signingSecret, now: m.clock.now }).ok, `the ${name} rotation's secret verifies`)
})
