import t from 'tap'
import { join } from 'node:path'
import { verifyWebhook } from '../../src/domain/webhooks/verify.js'
import { call, tempDir } from '../helpers/meterd.js'
import { startReceiver } from '../helpers/webhook-receiver.js'
import { T0, alertsApi, cliRule, costing, exportApi, startAlertsMeterd } from '../helpers/alerts.js'

const MIN = 60_000
const HOUR = 60 * MIN

t.test('a rule fires alert.triggered once, resolves once, signed, to subscribed configurations and Slack', async (t) => {
  const { m, alerts, engine } = await startAlertsMeterd(t)
  const rx = await startReceiver(t)
  const usageOnly = await startReceiver(t)
  const slack = await startReceiver(t)
  const key = await m.key({ team: 'team-a' })
  const other = await m.key({ team: 'team-b', account: 'acct-b' })
  const config = await call(exportApi(m), { key, body: { name: 'alerts', url: rx.url, eventTypes: ['alert.triggered', 'alert.resolved'] } })
  t.equal(config.status, 201)
  const secret = config.body.signingSecret // signed by default: shown once in the create answer
  await call(exportApi(m), { key, body: { name: 'usage only', url: usageOnly.url, eventTypes: ['usage.completion'] } })
  // An hour-long sliding window of cost above 10 USD, for AcmeOrg only.
  const rule = await call(alertsApi(m), {
    key,
    body: cliRule({ name: 'hourly spend', threshold: 10, periodDuration: 'ONE_HOUR', filters: [{ dimension: 'ORGANIZATION', operator: 'IS', value: 'AcmeOrg' }], slackConfigurations: [slack.url] }),
  })
  t.equal(rule.status, 201)
  const id = rule.body.id
  const evaluate = async () => {
    const n = await alerts.evaluator!.evaluate()
    await engine.settle()
    return n
  }

  // 6 + 5 = 11 USD for AcmeOrg (another organization's 100 USD and another team's do not count).
  for (const body of [costing(6, T0 - 30 * MIN), costing(5, T0 - 10 * MIN), costing(100, T0 - 10 * MIN, { organizationName: 'OtherOrg' })])
    t.equal((await call(`${m.url}/meter/v2/ai/completions`, { key, body })).status, 201)
  t.equal((await call(`${m.url}/meter/v2/ai/completions`, { key: other, body: costing(500, T0 - MIN) })).status, 201)
  t.equal(await evaluate(), 1, 'one change of state')
  t.equal(await evaluate(), 0, 'still above the threshold: nothing more')
  m.clock.advance(10 * MIN)
  t.equal(await evaluate(), 0, 'still firing ten minutes later: no repeat')
  await rx.waitFor(1)
  await slack.waitFor(1)
  t.equal(rx.received.length, 1)
  const [triggered] = rx.received
  t.match(triggered.json, {
    id: /^evt_/,
    type: 'alert.triggered',
    teamId: 'team-a',
    data: { ruleId: id, name: 'hourly spend', metricType: 'TOTAL_COST', operatorType: 'GREATER_THAN', threshold: '10', value: '11', firing: true },
  })
  t.equal(triggered.headers['x-service-event-type'], 'alert.triggered')
  t.ok(verifyWebhook(triggered.body, triggered.headers, { secrets: secret, now: T0 }).ok, 'signed like every other event (sent at T0)')
  t.match(slack.received[0].json, { text: /Alert triggered.*hourly spend.*TOTAL_COST 11 \(GREATER_THAN 10\)/ })
  t.equal(slack.received[0].headers['x-service-signature-256'], undefined, 'Slack messages are not signed')
  t.equal(usageOnly.received.filter((r) => r.json.type?.startsWith('alert.')).length, 0, 'a configuration not subscribed to alerts gets none')

  const firing = await call(`${alertsApi(m)}/${id}`, { key })
  t.match(firing.body, { firing: true, currentValue: 11, threshold: 10, firingSince: new Date(T0).toISOString() })

  // The 6 USD record leaves the sliding hour: 5 USD left, below the threshold.
  m.clock.advance(25 * MIN)
  t.equal(await evaluate(), 1, 'resolved')
  t.equal(await evaluate(), 0, 'once')
  await rx.waitFor(2)
  await slack.waitFor(2)
  t.match(rx.received[1].json, { type: 'alert.resolved', data: { ruleId: id, value: '5', firing: false } })
  t.match(slack.received[1].json, { text: /Alert resolved/ })
  t.match((await call(`${alertsApi(m)}/${id}`, { key })).body, { firing: false, currentValue: 5, firingSince: null })

  const history = await call(`${alertsApi(m)}/${id}/events`, { key })
  t.equal(history.status, 200)
  t.same(
    history.body._embedded.aIAnomalyEventResourceList.map((e: any) => [e.type, e.value, e.threshold]),
    [
      ['alert.resolved', '5', '10'],
      ['alert.triggered', '11', '10'],
    ],
    'newest first, with the observed values',
  )
  t.equal(history.body._embedded.aIAnomalyEventResourceList[1].id, triggered.json.id, 'the history names the delivered event')
  t.equal((await call(`${alertsApi(m)}/${id}/events`, { key: other })).status, 404)
})

t.test('webhookConfigurations narrows delivery to the listed configurations', async (t) => {
  const { m, alerts, engine } = await startAlertsMeterd(t)
  const listed = await startReceiver(t)
  const subscribed = await startReceiver(t)
  const key = await m.key({ team: 'team-a' })
  const a = (await call(exportApi(m), { key, body: { name: 'listed', url: listed.url, eventTypes: ['usage.tool'] } })).body.id
  await call(exportApi(m), { key, body: { name: 'subscribed', url: subscribed.url, eventTypes: ['alert.triggered'] } })
  await call(alertsApi(m), { key, body: cliRule({ metricType: 'REQUESTS_PER_MINUTE', operatorType: 'GREATER_THAN_OR_EQUAL', threshold: 0, windowSeconds: 60, webhookConfigurations: [{ id: a }] }) })
  await alerts.evaluator!.evaluate()
  await engine.settle()
  await listed.waitFor(1)
  t.equal(listed.received[0].json.type, 'alert.triggered', 'a listed configuration gets the event whatever it subscribes to')
  t.equal(subscribed.received.length, 0, 'and only the listed ones do')
})

t.test('a budget (CUMULATIVE_USAGE) adds up the calendar month; RELATIVE_CHANGE compares two windows', async (t) => {
  const { m, alerts } = await startAlertsMeterd(t)
  const key = await m.key({ team: 'team-a' })
  const budget = (await call(alertsApi(m), { key, body: cliRule({ alertType: 'CUMULATIVE_USAGE', periodDuration: 'MONTHLY', threshold: undefined, budgetThreshold: 50, currency: 'USD' }) })).body.id
  const spike = (await call(alertsApi(m), { key, body: cliRule({ alertType: 'RELATIVE_CHANGE', metricType: 'TOTAL_COST', operatorType: 'PERCENT_INCREASE', threshold: 100, windowSeconds: 3600 }) })).body.id
  // June 2026: 20 USD on the 1st, 20 in the previous hour, 41 in the last hour; 1000 in May does not count.
  for (const [cost, at] of [[1000, Date.parse('2026-05-31T23:00:00Z')], [20, Date.parse('2026-06-01T00:00:00Z')], [20, T0 - 90 * MIN], [41, T0 - 30 * MIN]] as const)
    t.equal((await call(`${m.url}/meter/v2/ai/completions`, { key, body: costing(cost, at) })).status, 201)
  await alerts.evaluator!.evaluate()
  t.match((await call(`${alertsApi(m)}/${budget}`, { key })).body, { currentValue: 81, firing: true }, 'month to date: 20 + 20 + 41')
  t.match((await call(`${alertsApi(m)}/${spike}`, { key })).body, { currentValue: 105, firing: true }, 'the last hour is 105 % above the one before')
})

t.test('firing state survives a restart: no second alert.triggered for the same crossing', async (t) => {
  const dataDir = join(tempDir(), 'data')
  const rx = await startReceiver(t)
  let id: string
  {
    const { m, alerts, engine } = await startAlertsMeterd(t, { dataDir })
    const key = await m.key({ team: 'team-a' })
    await call(exportApi(m), { key, body: { name: 'alerts', url: rx.url, eventTypes: ['alert.triggered', 'alert.resolved'] } })
    id = (await call(alertsApi(m), { key, body: cliRule({ threshold: 1 }) })).body.id
    await call(`${m.url}/meter/v2/ai/completions`, { key, body: costing(2, T0 - HOUR) })
    t.equal(await alerts.evaluator!.evaluate(), 1)
    await engine.settle()
    await rx.waitFor(1)
    await m.close()
  }
  const { m, alerts, engine } = await startAlertsMeterd(t, { dataDir })
  const key = await m.key({ team: 'team-a', account: 'acct-1' })
  t.equal(await alerts.evaluator!.evaluate(), 0, 'the restarted daemon knows the rule is already firing')
  await engine.settle()
  t.equal(rx.received.length, 1)
  t.match((await call(`${alertsApi(m)}/${id}`, { key })).body, { firing: true, currentValue: 2 })
})

t.test('kill -9 after an alert fired: the restarted daemon neither repeats nor loses it', async (t) => {
  const { spawnMeterd, writeConfig, ADMIN_KEY } = await import('../helpers/meterd.js')
  const { DEFAULT_CONFIG_PATH } = await import('../../src/core/config/load.js')
  const dir = tempDir()
  const dataDir = join(dir, 'data')
  const rx = await startReceiver(t)
  const cfg = writeConfig(dir, {
    extensions: { exportconfigs: { allow_private_destinations: ['127.0.0.1'], poll_interval_ms: 50 }, alerts: { evaluation_interval_seconds: 0.1 } },
  })
  const first = await spawnMeterd(t, { dataDir, configFiles: [DEFAULT_CONFIG_PATH, cfg] })
  const key = ADMIN_KEY
  t.equal((await call(exportApi(first), { key, body: { name: 'alerts', url: rx.url, eventTypes: ['alert.triggered', 'alert.resolved'] } })).status, 201)
  t.equal((await call(`${first.url}/meter/v2/ai/completions`, { key, body: costing(3, Date.now() - 1000) })).status, 201)
  t.equal((await call(alertsApi(first), { key, body: cliRule({ threshold: 1 }) })).status, 201)
  await rx.waitFor(1, 10_000)
  await first.stop('SIGKILL')
  const second = await spawnMeterd(t, { dataDir, configFiles: [DEFAULT_CONFIG_PATH, cfg] })
  await new Promise((r) => setTimeout(r, 1000)) // ten evaluation intervals
  // A delivery in flight at kill -9 is attempted again (webhooks are at least once; receivers
  // dedup by event id): what must not happen is a second event for the same crossing.
  const events = new Set(rx.received.filter((r) => r.json?.type === 'alert.triggered').map((r) => r.json.id))
  t.equal(events.size, 1, 'one alert.triggered event in all')
  const rule = (await call(alertsApi(second), { key })).body._embedded.aIAnomalyResourceList[0]
  t.match(rule, { firing: true, currentValue: 3 })
  const history = await call(`${alertsApi(second)}/${rule.id}/events`, { key })
  t.same(history.body._embedded.aIAnomalyEventResourceList.map((e: any) => e.id), [...events], 'and one entry in its history')
  await second.stop()
})
