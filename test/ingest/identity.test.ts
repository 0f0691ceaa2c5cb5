/**
 * Issue 15 #8: the caller's identity comes from its key only. A body may repeat it (the field is
 * dropped); a body that names another team, tenant, account or key is a 403 — the same for
 * completions, tool events and tool bodies.
 */
import t from 'tap'
import { call, startMeterd } from '../helpers/meterd.js'
import { completion, toolEvent } from '../fixtures/wire-examples.js'

const C = '/meter/v2/ai/completions'
const T = '/meter/v2/tool/events'
const LIST = '/profitstream/v2/api/sources/metrics'
const TOOLS = '/profitstream/v2/api/tools'

t.test('records: a claimed identity that is not the key’s is a 403; the key’s own is dropped', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key({ team: 'team-a', account: 'acct-1' })
  await m.key({ team: 'team-b', account: 'acct-1' })

  for (const [path, body] of [
    [C, completion({ teamId: 'team-b' })],
    [T, toolEvent({ teamId: 'team-b' })],
    [C, completion({ team: { id: 'team-b' } })],
  ] as const) {
    const res = await call(m.url + path, { key, body })
    t.equal(res.status, 403, `${path}: another team in the body`)
    t.match(res.body.error, { type: 'permission_error', code: 'team_mismatch' })
  }
  for (const [field, value] of [['account', 'acct-9'], ['accountId', 'acct-9'], ['tenantId', 'other'], ['tenant', 'other'], ['keyId', 'key_x']]) {
    const res = await call(m.url + C, { key, body: completion({ [field]: value }) })
    t.equal(res.status, 403, `${field} naming someone else`)
    t.match(res.body.error, { code: 'identity_mismatch', param: field })
  }
  const batch = await call(m.url + C, { key, body: [completion(), completion({ account: 'acct-9' })] })
  t.match(batch.body.error, { code: 'identity_mismatch', param: '[1].account' }, 'in a batch the param names the item')

  const own = completion({ teamId: 'team-a', account: 'acct-1', tenant: 'default' })
  const ok = await call(m.url + C, { key, body: own })
  t.equal(ok.status, 201, 'a body repeating the key’s own identity is accepted')
  const stored = (await call(`${m.url}${LIST}/ai/completions?transactionId=${own.transactionId}`, { key })).body._embedded.aICompletionMetricResourceList[0]
  t.equal(stored.teamId, undefined, 'the repeated teamId is not stored')
  t.equal(stored.account, undefined)
  t.same(stored.team, { id: 'team-a' }, 'the team shown is the key’s')
  const tool = await call(m.url + T, { key, body: toolEvent({ teamId: 'team-a' }) })
  t.equal(tool.status, 201)

  const listed = await call(`${m.url}${LIST}/ai/completions`, { key })
  t.equal(listed.body.page.totalElements, 1, 'nothing refused was stored')
})

t.test('tools: POST and PUT with another team’s teamId are 403; the own one is accepted', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key({ team: 'team-a' })
  const tool = { toolId: 'geo-lookup', name: 'Geo', toolType: 'REST_API', pricing: { elements: [{ name: 'requests', unitPrice: 0.01, aggregationType: 'COUNT' }] } }
  const other = await call(m.url + TOOLS, { key, body: { ...tool, teamId: 'team-b' } })
  t.equal(other.status, 403, 'docs/tools.md: a teamId in a body other than the key’s team is a 403')
  t.match(other.body.error, { code: 'team_mismatch', param: 'teamId' })
  const created = await call(m.url + TOOLS, { key, body: { ...tool, teamId: 'team-a' } })
  t.equal(created.status, 201, 'the platform CLI sends its own teamId')
  const put = await call(`${m.url}${TOOLS}/${created.body.id}`, { key, method: 'PUT', body: { ...created.body, teamId: 'team-b' } })
  t.equal(put.status, 403)
  const back = await call(`${m.url}${TOOLS}/${created.body.id}`, { key, method: 'PUT', body: { ...created.body, name: 'Geo 2' } })
  t.equal(back.status, 200, 'a tool read back and sent again (team: {id}) is the own team')
  t.equal(back.body.name, 'Geo 2')
})
