import t from 'tap'
import { call } from '../helpers/meterd.js'
import { alertsApi, cliRule, startAlertsMeterd } from '../helpers/alerts.js'
import { slowWrite, together } from '../helpers/slow-write.js'

t.test('a PUT whose body arrives after the rule was deleted answers 404 and does not bring the rule back', async (t) => {
  const { m } = await startAlertsMeterd(t)
  const key = await m.key({ team: 'team-a' })
  const created = await call(alertsApi(m), { key, body: cliRule() })
  t.equal(created.status, 201)
  const url = `${alertsApi(m)}/${created.body.id}`
  const status = await slowWrite(url, key, 'PUT', JSON.stringify({ name: 'renamed' }), async () => {
    t.equal((await call(url, { method: 'DELETE', key })).status, 200)
  })
  t.equal(status, 404)
  t.equal((await call(url, { key })).status, 404, 'the rule stays deleted')
  t.same((await call(alertsApi(m), { key })).body._embedded.aIAnomalyResourceList, [])
})

t.test('a PUT merges over the rule as it is when its body arrives, keeping a change made meanwhile', async (t) => {
  const { m } = await startAlertsMeterd(t)
  const key = await m.key({ team: 'team-a' })
  const created = await call(alertsApi(m), { key, body: cliRule() })
  const url = `${alertsApi(m)}/${created.body.id}`
  const status = await slowWrite(url, key, 'PUT', JSON.stringify({ name: 'renamed' }), async () => {
    t.equal((await call(url, { method: 'PUT', key, body: { threshold: 250 } })).status, 200)
  })
  t.equal(status, 200)
  t.match((await call(url, { key })).body, { name: 'renamed', threshold: 250 })
})

t.test('two PUTs of a rule at once both take effect', async (t) => {
  const { m } = await startAlertsMeterd(t)
  const key = await m.key({ team: 'team-a' })
  const created = await call(alertsApi(m), { key, body: cliRule() })
  const url = `${alertsApi(m)}/${created.body.id}`
  const answers = await together([
    { url, key, method: 'PUT', body: JSON.stringify({ name: 'renamed' }) },
    { url, key, method: 'PUT', body: JSON.stringify({ description: 'described' }) },
  ])
  t.same(answers.map((a) => a.status), [200, 200])
  t.match((await call(url, { key })).body, { name: 'renamed', description: 'described' }, 'neither change overwrote the other')
})
