import t from 'tap'
import { call } from '../helpers/meterd.js'
import { together } from '../helpers/slow-write.js'
import { API, createTool, startPricing, toolBody } from '../helpers/pricing.js'

t.test('a PUT and a DELETE of a tool at once, in either order: the deletion answered 200 stands', async (t) => {
  const m = await startPricing(t)
  const key = await m.key({ team: 'team-a' })
  for (let i = 0; i < 4; i++) {
    const tool = await createTool(m, key, toolBody(`race-${i}`, { name: 'calls', aggregationType: 'COUNT', unitPrice: '0.01' }))
    const url = `${m.url}${API}/tools/${tool.id}`
    const put = { url, key, method: 'PUT', body: JSON.stringify({ name: 'renamed' }) }
    const del = { url, key, method: 'DELETE', body: '' }
    const answers = await together(i % 2 ? [put, del] : [del, put])
    t.equal(answers[i % 2 ? 1 : 0].status, 200, 'the DELETE is answered 200')
    t.equal((await call(url, { key })).status, 404, 'the tool stays deleted')
    t.equal((await call(`${m.url}${API}/tools/by-tool-id/race-${i}`, { key })).status, 404, 'its toolId prices nothing')
  }
})

t.test('two PUTs of a tool at once: each is a revision of its own, the later merged over the earlier', async (t) => {
  const m = await startPricing(t)
  const key = await m.key({ team: 'team-a' })
  const tool = await createTool(m, key, toolBody('twice', { name: 'calls', aggregationType: 'COUNT', unitPrice: '0.01' }))
  const url = `${m.url}${API}/tools/${tool.id}`
  const [a, b] = await together([
    { url, key, method: 'PUT', body: JSON.stringify({ name: 'renamed' }) },
    { url, key, method: 'PUT', body: JSON.stringify({ description: 'described' }) },
  ])
  t.equal(a.status, 200)
  t.equal(b.status, 200)
  t.not(a.body.revision, b.body.revision, 'two revisions, not one number for two prices')
  t.match((await call(url, { key })).body, { name: 'renamed', description: 'described', revision: 3 })
})
