import t from 'tap'
import { call, startMeterd } from '../helpers/meterd.js'
import { T0, alertsApi, cliRule, costing, exportApi, startAlertsMeterd } from '../helpers/alerts.js'

t.test('the CLI body creates a rule with a short id; GET shows threshold, currentValue and firing', async (t) => {
  const { m, alerts } = await startAlertsMeterd(t)
  const key = await m.key({ team: 'team-a' })
  const created = await call(`${alertsApi(m)}?teamId=team-a`, { key, body: cliRule({ teamId: 'team-a' }) })
  t.equal(created.status, 201)
  t.match(created.body, {
    id: /^[0-9A-Za-z]{6}$/,
    teamId: 'team-a',
    name: 'Daily spend',
    alertType: 'THRESHOLD',
    metricType: 'TOTAL_COST',
    operatorType: 'GREATER_THAN',
    threshold: 100,
    periodDuration: 'DAILY',
    notificationAddresses: ['ops@example.com'],
    enabled: true,
    firing: false,
    currentValue: null,
  })
  const id = created.body.id
  t.equal((await call(`${m.url}/meter/v2/ai/completions`, { key, body: costing(40.5, T0 - 1000) })).status, 201)
  await alerts.evaluator!.evaluate()
  const got = await call(`${alertsApi(m)}/${id}?teamId=team-a`, { key })
  t.equal(got.status, 200)
  t.match(got.body, { id, threshold: 100, currentValue: 40.5, firing: false, evaluatedAt: new Date(T0).toISOString() })

  const list = await call(alertsApi(m), { key })
  t.equal(list.status, 200)
  t.same(list.body._embedded.aIAnomalyResourceList.map((r: any) => r.id), [id])
  t.match(list.body.page, { totalElements: 1, number: 0 })
})

t.test('unknown values answer 400 naming the field and listing the allowed values', async (t) => {
  const { m } = await startAlertsMeterd(t)
  const key = await m.key({ team: 'team-a' })
  const cases: [Record<string, unknown>, string, RegExp][] = [
    [{ alertType: 'SOMETIMES' }, 'alertType', /THRESHOLD, RELATIVE_CHANGE, CUMULATIVE_USAGE/],
    [{ metricType: 'VIBES' }, 'metricType', /TOTAL_COST, .*LATENCY_P95/],
    [{ operatorType: 'ABOUT' }, 'operatorType', /GREATER_THAN, GREATER_THAN_OR_EQUAL, LESS_THAN, LESS_THAN_OR_EQUAL/],
    [{ periodDuration: 'FORTNIGHTLY' }, 'periodDuration', /ONE_HOUR, DAILY, WEEKLY, MONTHLY, QUARTERLY/],
    [{ threshold: 'lots' }, 'threshold', /number/],
    [{ threshold: undefined }, 'threshold', /number/],
    [{ name: '' }, 'name', /non-empty/],
    [{ filters: [{ dimension: 'COLOUR', operator: 'IS', value: 'red' }] }, 'filters[0].dimension', /ORGANIZATION, PRODUCT, MODEL/],
    [{ filters: [{ dimension: 'MODEL', operator: 'LIKE', value: 'x' }] }, 'filters[0].operator', /IS, IS_NOT, CONTAINS, STARTS_WITH, ENDS_WITH, IN/],
    [{ filters: [{ dimension: 'MODEL', operator: 'IN', value: 'x' }] }, 'filters[0].values', /non-empty list/],
    [{ notificationAddresses: ['not-an-address'] }, 'notificationAddresses[0]', /e-mail/],
    [{ slackConfigurations: ['ftp://x'] }, 'slackConfigurations[0]', /http/],
    // The webhooks' SSRF guard applies to Slack targets when the rule is written, not only at delivery.
    [{ slackConfigurations: ['http://10.0.0.1/hook'] }, 'slackConfigurations[0]', /refused/],
    [{ slackConfigurations: ['https://hooks.slack.com/services/T/B/x', { webhookUrl: 'http://[64:ff9b::a00:1]/x' }] }, 'slackConfigurations[1]', /refused/],
    [{ windowSeconds: 5 }, 'windowSeconds', /60 to/],
    [{ alertType: 'CUMULATIVE_USAGE', windowSeconds: 600 }, 'windowSeconds', /CUMULATIVE_USAGE/],
    [{ alertType: 'THRESHOLD', operatorType: 'PERCENT_INCREASE' }, 'operatorType', /GREATER_THAN/],
    [{ webhookConfigurations: ['exp_nope'] }, 'webhookConfigurations[0]', /no export configuration/],
  ]
  for (const [change, param, message] of cases) {
    const res = await call(alertsApi(m), { key, body: cliRule(change) })
    t.equal(res.status, 400, `${JSON.stringify(change)} → 400`)
    t.equal(res.body?.error?.param, param, `names ${param}`)
    t.match(res.body?.error?.message, message)
  }
  const teamMismatch = await call(alertsApi(m), { key, body: cliRule({ teamId: 'team-b' }) })
  t.equal(teamMismatch.status, 403, 'a teamId in the body must be the key’s team')
  for (const team of ['team-b', { id: 'team-b' }]) {
    const res = await call(alertsApi(m), { key, body: cliRule({ team }) })
    t.equal(res.status, 403, `team ${JSON.stringify(team)} in the body is another team`)
    t.match(res.body?.error, { code: 'team_mismatch', param: 'team' })
  }
  t.same((await call(alertsApi(m), { key })).body._embedded.aIAnomalyResourceList, [], 'no rule was made in the key’s team')
  t.equal((await call(alertsApi(m), { key, body: cliRule({ teamId: 'team-a', team: { id: 'team-a' } }) })).status, 201, 'the key’s own team may be repeated')
})

t.test('a threshold past 10^15 in size is a 400 naming it; one at the bound reads back as sent', async (t) => {
  const { m } = await startAlertsMeterd(t)
  const key = await m.key({ team: 'team-a' })
  // A decimal string past 10^308 was taken (201) and read back as threshold: null.
  for (const [change, param] of [
    [{ threshold: '1' + '0'.repeat(400) }, 'threshold'],
    [{ threshold: 1e300 }, 'threshold'],
    [{ threshold: -1e16 }, 'threshold'],
    [{ alertType: 'CUMULATIVE_USAGE', budgetThreshold: '1' + '0'.repeat(400), threshold: undefined }, 'budgetThreshold'],
  ] as const) {
    const res = await call(alertsApi(m), { key, body: cliRule(change) })
    t.equal(res.status, 400, `${param} ${JSON.stringify(change).slice(0, 40)}: 400`)
    t.match(res.body?.error, { code: 'invalid_field', param, message: /from -1000000000000000 to 1000000000000000/ })
  }
  t.same((await call(alertsApi(m), { key })).body._embedded.aIAnomalyResourceList, [], 'no rule was made')
  const bound = await call(alertsApi(m), { key, body: cliRule({ threshold: '1000000000000000' }) })
  t.equal(bound.status, 201)
  t.equal(bound.body.threshold, 1e15, 'read back as the number sent')
  const read = await call(`${alertsApi(m)}/${bound.body.id}`, { key })
  t.equal(read.body.threshold, 1e15)
})

t.test('accepted spellings: _TO operators, IN filters, budgets, change operators, Slack objects', async (t) => {
  const { m } = await startAlertsMeterd(t)
  const key = await m.key({ team: 'team-a' })
  const a = await call(alertsApi(m), { key, body: cliRule({ operatorType: 'greater_than_or_equal_to', filters: [{ dimension: 'model', operator: 'IN', values: ['gpt-4o', 'gpt-4o-mini'] }, { dimension: 'PROVIDER', operator: 'EQUALS', value: 'OpenAI' }] }) })
  t.equal(a.status, 201)
  t.equal(a.body.operatorType, 'GREATER_THAN_OR_EQUAL')
  t.same(a.body.filters, [{ dimension: 'MODEL', operator: 'IN', values: ['gpt-4o', 'gpt-4o-mini'] }, { dimension: 'PROVIDER', operator: 'IS', value: 'OpenAI' }])
  const budget = await call(alertsApi(m), { key, body: cliRule({ alertType: 'CUMULATIVE_USAGE', periodDuration: 'MONTHLY', threshold: undefined, budgetThreshold: 5000, currency: 'USD' }) })
  t.equal(budget.status, 201)
  t.match(budget.body, { alertType: 'CUMULATIVE_USAGE', threshold: 5000, budgetThreshold: 5000, currency: 'USD' })
  const change = await call(alertsApi(m), { key, body: cliRule({ alertType: 'RELATIVE_CHANGE', operatorType: 'PERCENT_INCREASE', threshold: 50, windowSeconds: 600 }) })
  t.equal(change.status, 201)
  t.match(change.body, { operatorType: 'PERCENT_INCREASE', windowSeconds: 600 })
  const slack = await call(alertsApi(m), { key, body: cliRule({ slackConfigurations: ['https://hooks.slack.com/services/T/B/x', { webhookUrl: 'https://hooks.slack.com/services/T/B/y', channel: '#ops' }] }) })
  t.equal(slack.status, 201)
  t.same(slack.body.slackConfigurations, [{ webhookUrl: 'https://hooks.slack.com/services/T/B/x' }, { webhookUrl: 'https://hooks.slack.com/services/T/B/y', channel: '#ops' }])
})

t.test('an explicit null threshold or enabled is taken as absent, as JSON clients send "not set"', async (t) => {
  const { m } = await startAlertsMeterd(t)
  const key = await m.key({ team: 'team-a' })
  // Python's None and Go's nil pointers arrive as null; a budget without threshold was taken, one with threshold: null was a 400.
  const budget = await call(alertsApi(m), { key, body: cliRule({ alertType: 'CUMULATIVE_USAGE', periodDuration: 'MONTHLY', threshold: null, budgetThreshold: 5000, currency: 'USD', enabled: null }) })
  t.equal(budget.status, 201)
  t.match(budget.body, { alertType: 'CUMULATIVE_USAGE', threshold: 5000, budgetThreshold: 5000, enabled: true })
  const id = (await call(alertsApi(m), { key, body: cliRule({ threshold: 7, enabled: false }) })).body.id
  const put = await call(`${alertsApi(m)}/${id}`, { key, method: 'PUT', body: { threshold: null, enabled: null, name: 'renamed' } })
  t.equal(put.status, 200)
  t.match(put.body, { threshold: 7, enabled: false, name: 'renamed' }, 'null keeps the rule’s own values')
  const none = await call(alertsApi(m), { key, body: cliRule({ threshold: null }) })
  t.equal(none.status, 400, 'a threshold is still needed where nothing else gives one')
  t.match(none.body.error, { code: 'invalid_field', param: 'threshold' })
})

t.test('PUT replaces what it sends and keeps the rest; DELETE removes; another team sees nothing', async (t) => {
  const { m } = await startAlertsMeterd(t)
  const key = await m.key({ team: 'team-a' })
  const other = await m.key({ team: 'team-b', account: 'acct-b' })
  const id = (await call(alertsApi(m), { key, body: cliRule() })).body.id
  const put = await call(`${alertsApi(m)}/${id}`, { key, method: 'PUT', body: { threshold: '250.75', enabled: false } })
  t.equal(put.status, 200)
  t.match(put.body, { id, threshold: 250.75, enabled: false, name: 'Daily spend', metricType: 'TOTAL_COST' })
  t.equal((await call(`${alertsApi(m)}/${id}`, { key: other })).status, 404, 'another team’s rule is not found')
  t.equal((await call(`${alertsApi(m)}/${id}`, { key: other, method: 'PUT', body: { threshold: 1 } })).status, 404)
  t.equal((await call(`${alertsApi(m)}/${id}`, { key: other, method: 'DELETE' })).status, 404)
  t.same((await call(alertsApi(m), { key: other })).body._embedded.aIAnomalyResourceList, [])
  t.equal((await call(`${alertsApi(m)}?teamId=team-b`, { key })).status, 403, 'teamId must match the key')
  const del = await call(`${alertsApi(m)}/${id}`, { key, method: 'DELETE' })
  t.equal(del.status, 200)
  t.equal((await call(`${alertsApi(m)}/${id}`, { key })).status, 404)
  const reader = await m.key({ team: 'team-a', scopes: ['platform:read'] })
  t.equal((await call(alertsApi(m), { key: reader, body: cliRule() })).status, 403, 'creating needs platform:write')
  t.equal((await call(alertsApi(m), { key: reader })).status, 200)
})

t.test('a burst of creations stops at max_rules_per_team: rules still being written count', async (t) => {
  const m = await startMeterd(t, {
    config: {
      extensions: { alerts: { evaluation_interval_seconds: 3600, max_rules_per_team: 3 } },
      service: { extensions: ['apikeys', 'exportconfigs', 'tools', 'alerts'] },
    },
  })
  const key = await m.key({ team: 'team-a' })
  const statuses = await Promise.all(Array.from({ length: 12 }, () => call(alertsApi(m), { key, body: cliRule() }).then((r) => r.status)))
  t.same(statuses.filter((s) => s === 201).length, 3, 'three created')
  t.same(statuses.filter((s) => s === 422).length, 9, 'the rest refused with too_many_rules')
  t.equal((await call(alertsApi(m), { key })).body.page.totalElements, 3)
  t.equal((await call(alertsApi(m), { key, body: cliRule() })).status, 422, 'and the next one too')
})

t.test('a rule whose export configuration was deleted can still be changed (disabled, or re-sent as the CLI does)', async (t) => {
  const { m } = await startAlertsMeterd(t)
  const key = await m.key({ team: 'team-a' })
  const config = await call(exportApi(m), { key, body: { name: 'alerts', url: 'http://127.0.0.1:9/hook', eventTypes: ['alert.triggered'] } })
  t.equal(config.status, 201)
  const created = await call(alertsApi(m), { key, body: cliRule({ webhookConfigurations: [config.body.id] }) })
  t.equal(created.status, 201)
  const url = `${alertsApi(m)}/${created.body.id}`
  t.equal((await call(`${exportApi(m)}/${config.body.id}`, { method: 'DELETE', key })).status, 204)

  const disabled = await call(url, { method: 'PUT', key, body: { enabled: false } })
  t.equal(disabled.status, 200, 'disabling does not trip over the deleted configuration')
  t.equal(disabled.body.enabled, false)
  const resent = await call(url, { method: 'PUT', key, body: { ...(await call(url, { key })).body, name: 'renamed' } })
  t.equal(resent.status, 200, 'get → merge → put passes')
  const added = await call(url, { method: 'PUT', key, body: { webhookConfigurations: [config.body.id, 'exp_unknown'] } })
  t.equal(added.status, 400, 'an id the rule did not hold is still checked')
  t.equal(added.body.error.param, 'webhookConfigurations[1]')
})
