import t from 'tap'
import { call } from '../helpers/meterd.js'
import { slowWrite, together } from '../helpers/slow-write.js'
import { api, startWebhookMeterd } from '../helpers/webhook-receiver.js'

t.test('a PATCH or PUT whose body arrives after a DELETE answers 404 and does not bring the configuration back', async (t) => {
  const { m } = await startWebhookMeterd(t)
  const key = await m.key({ team: 'team-a' })
  for (const method of ['PATCH', 'PUT']) {
    const created = await call(api(m), { key, body: { name: 'billing', url: 'http://127.0.0.1:9/hook' } })
    t.equal(created.status, 201)
    const url = `${api(m)}/${created.body.id}`
    const status = await slowWrite(url, key, method, JSON.stringify({ name: 'renamed', url: 'http://127.0.0.1:9/hook' }), async () => {
      t.equal((await call(url, { method: 'DELETE', key })).status, 204)
    })
    t.equal(status, 404, `${method} of a deleted configuration`)
    t.equal((await call(url, { key })).status, 404, `the configuration stays deleted after the ${method}`)
    t.same((await call(api(m), { key })).body.data, [])
  }
})

t.test('rotating the secret of a configuration deleted while its body arrived answers 404, with no secret', async (t) => {
  const { m } = await startWebhookMeterd(t)
  const key = await m.key({ team: 'team-a' })
  const created = await call(api(m), { key, body: { name: 'billing', url: 'http://127.0.0.1:9/hook' } })
  const url = `${api(m)}/${created.body.id}`
  const status = await slowWrite(`${url}/rotate-signing-secret`, key, 'POST', '{}', async () => {
    t.equal((await call(url, { method: 'DELETE', key })).status, 204)
  })
  t.equal(status, 404)
})

t.test('a PATCH merges over the configuration as it is when its body arrives, keeping a change made meanwhile', async (t) => {
  const { m } = await startWebhookMeterd(t)
  const key = await m.key({ team: 'team-a' })
  const created = await call(api(m), { key, body: { name: 'billing', url: 'http://127.0.0.1:9/hook' } })
  const url = `${api(m)}/${created.body.id}`
  const status = await slowWrite(url, key, 'PATCH', JSON.stringify({ name: 'renamed' }), async () => {
    t.equal((await call(url, { method: 'PATCH', key, body: { timeoutMs: 5000 } })).status, 200)
  })
  t.equal(status, 200)
  t.match((await call(url, { key })).body, { name: 'renamed', timeoutMs: 5000 })
})

t.test('two PATCHes of a configuration at once both take effect', async (t) => {
  const { m } = await startWebhookMeterd(t)
  const key = await m.key({ team: 'team-a' })
  const created = await call(api(m), { key, body: { name: 'billing', url: 'http://127.0.0.1:9/hook' } })
  const url = `${api(m)}/${created.body.id}`
  const answers = await together([
    { url, key, method: 'PATCH', body: JSON.stringify({ name: 'renamed' }) },
    { url, key, method: 'PATCH', body: JSON.stringify({ timeoutMs: 5000 }) },
  ])
  t.same(answers.map((a) => a.status), [200, 200])
  t.match((await call(url, { key })).body, { name: 'renamed', timeoutMs: 5000 }, 'neither change overwrote the other')
})
