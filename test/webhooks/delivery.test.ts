import t from 'tap'
import { call } from '../helpers/meterd.js'
import { completion, toolEvent } from '../fixtures/wire-examples.js'
import { verifyWebhook } from '../../src/domain/webhooks/verify.js'
import { api, startReceiver, startWebhookMeterd, type Received } from '../helpers/webhook-receiver.js'

const SIGNED_HEADERS = ['content-type', 'x-service-webhook-id', 'x-service-delivery-id', 'x-service-event-type', 'x-service-webhook-timestamp', 'x-service-signature-256']

t.test('usage events and send-test-event take the same path: same headers, verified, filtered per configuration', async (t) => {
  const { m, engine } = await startWebhookMeterd(t)
  const rx = await startReceiver(t)
  const other = await startReceiver(t)
  const key = await m.key({ team: 'team-a' })
  const keyB = await m.key({ team: 'team-b', account: 'acct-b' })
  // Signed by default: the create answer carries the secret, and the first delivery is signed with it.
  const created = await call(api(m), { key, body: { name: 'all', url: rx.url, filters: { organizationName: 'AcmeOrg' } } })
  const { id, signingSecret: secret } = created.body
  t.match(secret, /^whsec_/)
  // Team b's configuration must never see team a's records; a tool-only configuration no completions (and opted out of signing).
  await call(api(m), { key: keyB, body: { name: 'b', url: other.url } })
  const toolsOnly = (await call(api(m), { key, body: { name: 'tools', url: other.url, eventTypes: ['usage.tool'], filters: { toolId: ['web-search'] }, signingEnabled: false } })).body.id

  const test = await call(`${api(m)}/${id}/send-test-event?teamId=team-a`, { key, body: {} })
  t.equal(test.status, 202)
  t.match(test.body, { eventId: /^evt_/, deliveryId: /^dlv_/, status: 'pending' })
  await engine.settle()
  const [testDelivery] = await rx.waitFor(1)
  t.match(testDelivery.json, { id: test.body.eventId, type: 'test', teamId: 'team-a', created: new Date(m.clock.now).toISOString(), data: { exportConfigurationId: id } })
  t.ok(verifyWebhook(testDelivery.body, testDelivery.headers, { secrets: secret, now: m.clock.now }).ok, 'the verifier accepts the test event')

  const rec = await call(`${m.url}/meter/v2/ai/completions`, { key, body: completion({ organizationName: 'AcmeOrg' }) })
  t.equal(rec.status, 201)
  t.equal((await call(`${m.url}/meter/v2/ai/completions`, { key, body: completion({ organizationName: 'OtherOrg' }) })).status, 201)
  t.equal((await call(`${m.url}/meter/v2/tool/events`, { key, body: toolEvent() })).status, 201)
  t.equal((await call(`${m.url}/meter/v2/tool/events`, { key, body: toolEvent({ toolId: 'db-query' }) })).status, 201)
  await engine.settle()
  await rx.waitFor(2)
  await other.waitFor(1)
  const usage = rx.received[1]
  t.equal(rx.received.length, 2, 'the OtherOrg completion and the tool events (no organization) are filtered out')
  t.match(usage.json, { id: /^evt_/, type: 'usage.completion', teamId: 'team-a', data: { id: rec.body.id, organizationName: 'AcmeOrg', model: 'gpt-4o-mini' } })
  t.same(Object.keys(usage.json), ['id', 'type', 'created', 'teamId', 'data'])
  t.ok(verifyWebhook(usage.body, usage.headers, { secrets: secret, now: m.clock.now }).ok)
  for (const h of SIGNED_HEADERS) {
    t.ok(testDelivery.headers[h], `test event has ${h}`)
    t.ok(usage.headers[h], `usage event has ${h}`)
  }
  t.same(Object.keys(testDelivery.headers).sort(), Object.keys(usage.headers).sort(), 'the test event carries exactly the headers of a real one')
  t.equal(usage.headers['x-service-event-type'], 'usage.completion')
  t.equal(other.received.length, 1, 'the tool-only configuration got only the web-search tool event; team b got nothing')
  t.match(other.received[0].json, { type: 'usage.tool', teamId: 'team-a', data: { toolId: 'web-search' } })
  t.equal(other.received[0].headers['x-service-signature-256'], undefined, 'unsigned configuration: no signature header')
  t.equal(other.received[0].headers['x-service-webhook-timestamp'], undefined, 'unsigned configuration: no timestamp header')
  t.ok(other.received[0].headers['x-service-webhook-id'], 'but the event-id header')

  const list = await call(`${api(m)}/${id}/deliveries?teamId=team-a`, { key })
  t.equal(list.status, 200)
  t.equal(list.body.data.length, 2)
  t.match(list.body.data[0], { status: 'succeeded', attemptCount: 1, attempts: [{ attempt: 1, statusCode: 200, succeeded: true }] })
  const one = await call(`${api(m)}/${id}/deliveries/${test.body.deliveryId}?teamId=team-a`, { key })
  t.match(one.body, { id: test.body.deliveryId, eventId: test.body.eventId, status: 'succeeded', event: { type: 'test' } })
  t.equal((await call(`${api(m)}/${toolsOnly}/deliveries/${test.body.deliveryId}`, { key })).status, 404, 'a delivery of another configuration')

  const metrics = (await call(`${m.url}/metrics`)).text
  t.match(metrics, /meterd_webhook_deliveries_attempted_total 3/)
  t.match(metrics, /meterd_webhook_deliveries_succeeded_total 3/)
  t.match(metrics, /meterd_webhook_deliveries_failed_total 0/)
  t.match(metrics, /meterd_webhook_deliveries_dead_lettered_total 0/)
  t.match(metrics, /meterd_webhook_queue_depth 0/)
  t.match(metrics, /meterd_webhook_delivery_duration_seconds_count 3/)
})

t.test('receiver down → retries on the schedule (clock advanced) → back → each event delivered once', async (t) => {
  const { m, engine } = await startWebhookMeterd(t, { exportconfigs: { retry_jitter: 0.2 } })
  const rx = await startReceiver(t)
  const port = Number(new URL(rx.url).port)
  const key = await m.key()
  const id = (await call(api(m), { key, body: { name: 'd', url: rx.url } })).body.id
  await rx.close() // down: connection refused

  for (let i = 0; i < 3; i++) t.equal((await call(`${m.url}/meter/v2/ai/completions`, { key, body: completion() })).status, 201)
  await engine.settle()
  const attempts = async () => (await call(`${api(m)}/${id}/deliveries`, { key })).body.data.map((d: any) => d.attemptCount)
  t.same(await attempts(), [1, 1, 1], 'first attempt at once')

  m.clock.advance(4_999)
  await engine.settle()
  t.same(await attempts(), [1, 1, 1], 'nothing before 5 s (jitter only ever lengthens a delay)')
  m.clock.advance(1_001 + 1_000) // 7 s > 5 s × 1.2
  await engine.settle()
  t.same(await attempts(), [2, 2, 2], 'second attempt after 5 s')
  m.clock.advance(4 * 60_000)
  await engine.settle()
  t.same(await attempts(), [2, 2, 2], 'third not before 5 min')
  m.clock.advance(2 * 60_000 + 1_000)
  await engine.settle()
  t.same(await attempts(), [3, 3, 3], 'third attempt after 5 min')
  const depth = (await call(`${m.url}/metrics`)).text
  t.match(depth, /meterd_webhook_queue_depth 3/)
  t.match(depth, /meterd_webhook_deliveries_failed_total 9/)

  const back = await startReceiver(t, () => ({ status: 200 }), port)
  m.clock.advance(36 * 60_000)
  await engine.settle()
  await back.waitFor(3)
  await engine.settle()
  const ids = back.received.map((r: Received) => r.json.id)
  t.equal(new Set(ids).size, 3, 'three distinct events')
  t.equal(ids.length, 3, 'each delivered exactly once')
  m.clock.advance(24 * 3_600_000)
  await engine.settle()
  t.equal(back.received.length, 3, 'no redelivery later')
  const list = (await call(`${api(m)}/${id}/deliveries`, { key })).body.data
  t.same(list.map((d: any) => [d.status, d.attemptCount]), [['succeeded', 4], ['succeeded', 4], ['succeeded', 4]])
  t.match(list[0].attempts[0].error, /ECONNREFUSED/)
  for (const r of back.received) t.equal(r.headers['x-service-webhook-timestamp'], String(Math.floor(m.clock.now / 1000) - 86400), 'signed afresh at the attempt time')
})

t.test('410 disables the configuration; 3xx is a failure and never followed', async (t) => {
  const { m, engine } = await startWebhookMeterd(t)
  const target = await startReceiver(t)
  const redirecting = await startReceiver(t, () => ({ status: 302, headers: { location: target.url } }))
  const gone = await startReceiver(t, () => ({ status: 410 }))
  const key = await m.key()
  const r = (await call(api(m), { key, body: { name: 'r', url: redirecting.url } })).body.id
  const g = (await call(api(m), { key, body: { name: 'g', url: gone.url } })).body.id

  await call(`${m.url}/meter/v2/ai/completions`, { key, body: completion() })
  await engine.settle()
  t.equal(redirecting.received.length, 1)
  t.equal(target.received.length, 0, 'the redirect is not followed')
  const rd = (await call(`${api(m)}/${r}/deliveries`, { key })).body.data[0]
  t.match(rd, { status: 'pending', attemptCount: 1, lastError: /redirect 302/ })

  t.equal(gone.received.length, 1)
  const cfg = (await call(`${api(m)}/${g}`, { key })).body
  t.match(cfg, { enabled: false, disabledReason: /410/ })
  t.match((await call(`${api(m)}/${g}/deliveries`, { key })).body.data[0], { status: 'failed', attemptCount: 1 })
  await call(`${m.url}/meter/v2/ai/completions`, { key, body: completion() })
  m.clock.advance(3_600_000)
  await engine.settle()
  t.equal(gone.received.length, 1, 'a disabled configuration gets nothing more')
  t.equal((await call(`${api(m)}/${g}/deliveries`, { key })).body.data.length, 1, 'and queues nothing')
  // Re-enabling clears the reason; recover replays the failed delivery.
  gone.respond = () => ({ status: 204 })
  t.match((await call(`${api(m)}/${g}`, { key, method: 'PATCH', body: { enabled: true } })).body, { enabled: true, disabledReason: undefined })
  const rec = await call(`${api(m)}/${g}/recover?since=2025-01-01T00:00:00Z`, { key, body: {} })
  t.match(rec.body, { requeued: 1 })
  await engine.settle()
  t.equal(gone.received.length, 2)
})

t.test('429 and 503 honour Retry-After', async (t) => {
  const { m, engine } = await startWebhookMeterd(t, { exportconfigs: { retry_jitter: 0 } })
  let answer: { status: number; headers?: Record<string, string> } = { status: 429, headers: { 'retry-after': '120' } }
  const rx = await startReceiver(t, () => answer)
  const key = await m.key()
  const id = (await call(api(m), { key, body: { name: 'x', url: rx.url } })).body.id
  await call(`${api(m)}/${id}/send-test-event`, { key, body: {} })
  await engine.settle()
  t.equal(rx.received.length, 1)
  m.clock.advance(60_000) // well past the 5 s schedule step
  await engine.settle()
  t.equal(rx.received.length, 1, 'no retry before Retry-After, although the schedule says 5 s')
  answer = { status: 503, headers: { 'retry-after': new Date(m.clock.now + 600_000).toUTCString() } }
  m.clock.advance(60_000)
  await engine.settle()
  t.equal(rx.received.length, 2, 'retried at 120 s')
  m.clock.advance(540_000 - 1_000)
  await engine.settle()
  t.equal(rx.received.length, 2, 'an HTTP-date Retry-After is honoured too')
  answer = { status: 200 }
  m.clock.advance(2_000)
  await engine.settle()
  t.equal(rx.received.length, 3)
  const d = (await call(`${api(m)}/${id}/deliveries`, { key })).body.data[0]
  t.match(d, { status: 'succeeded', attemptCount: 3 })
  t.same(d.attempts.map((a: any) => a.statusCode), [429, 503, 200])
})

t.test('dead-letter after the last attempt, then recover re-queues', async (t) => {
  const { m, engine } = await startWebhookMeterd(t, { exportconfigs: { retry_schedule_seconds: [0, 10, 60], retry_jitter: 0 } })
  let status = 500
  const rx = await startReceiver(t, () => ({ status }))
  const key = await m.key()
  const id = (await call(api(m), { key, body: { name: 'x', url: rx.url } })).body.id
  const sent = await call(`${api(m)}/${id}/send-test-event`, { key, body: {} })
  await engine.settle()
  m.clock.advance(10_000)
  await engine.settle()
  m.clock.advance(60_000)
  await engine.settle()
  t.equal(rx.received.length, 3, 'three attempts')
  m.clock.advance(24 * 3_600_000)
  await engine.settle()
  t.equal(rx.received.length, 3, 'then no more')
  const dead = await call(`${api(m)}/${id}/deliveries?status=dead_lettered`, { key })
  t.equal(dead.body.data.length, 1)
  t.match(dead.body.data[0], { id: sent.body.deliveryId, status: 'dead_lettered', attemptCount: 3, lastError: 'HTTP 500' })
  t.match((await call(`${m.url}/metrics`)).text, /meterd_webhook_deliveries_dead_lettered_total 1/)

  const future = new Date(m.clock.now + 1000).toISOString()
  t.match((await call(`${api(m)}/${id}/recover?since=${future}`, { key, body: {} })).body, { requeued: 0 }, 'since filters by failure time')
  status = 200
  const rec = await call(`${api(m)}/${id}/recover?since=2025-01-01T00:00:00Z`, { key, body: {} })
  t.equal(rec.status, 202)
  t.same(rec.body, { requeued: 1, deliveryIds: [sent.body.deliveryId] })
  await engine.settle()
  t.equal(rx.received.length, 4)
  t.equal(rx.received[3].json.id, sent.body.eventId, 'the same event, same id (receivers dedup on it)')
  t.match((await call(`${api(m)}/${id}/deliveries/${sent.body.deliveryId}`, { key })).body, { status: 'succeeded' })
})

t.test('batching: usage.batch at max events or after max wait', async (t) => {
  const { m, engine } = await startWebhookMeterd(t)
  const rx = await startReceiver(t)
  const key = await m.key()
  await call(api(m), { key, body: { name: 'b', url: rx.url, batching: { maxEvents: 3, maxWaitMs: 10_000 } } })
  for (let i = 0; i < 2; i++) await call(`${m.url}/meter/v2/ai/completions`, { key, body: completion() })
  await engine.settle()
  t.equal(rx.received.length, 0, 'two events wait for a batch')
  await call(`${m.url}/meter/v2/tool/events`, { key, body: toolEvent() })
  await engine.settle()
  await rx.waitFor(1)
  t.match(rx.received[0].json, { type: 'usage.batch', teamId: 'team-a', data: { count: 3 } })
  t.same(rx.received[0].json.data.events.map((e: any) => e.type), ['usage.completion', 'usage.completion', 'usage.tool'])
  await call(`${m.url}/meter/v2/ai/completions`, { key, body: completion() })
  m.clock.advance(9_999)
  await engine.settle()
  t.equal(rx.received.length, 1, 'not before max wait')
  m.clock.advance(1)
  await engine.settle()
  await rx.waitFor(2)
  t.match(rx.received[1].json, { type: 'usage.batch', data: { count: 1 } })
})

t.test('per-endpoint concurrency limit and per-configuration timeout', async (t) => {
  const { m, engine } = await startWebhookMeterd(t, { exportconfigs: { max_concurrency_per_endpoint: 2 } })
  let active = 0
  let peak = 0
  const release: (() => void)[] = []
  const rx = await startReceiver(t, () => {
    active++
    peak = Math.max(peak, active)
    return new Promise((resolve) => release.push(() => { active--; resolve({ status: 200 }) }))
  })
  const key = await m.key()
  const id = (await call(api(m), { key, body: { name: 'c', url: rx.url } })).body.id
  for (let i = 0; i < 6; i++) await call(`${api(m)}/${id}/send-test-event`, { key, body: {} })
  const settled = engine.settle()
  const until = Date.now() + 5000
  let released = 0
  while (released < 6 && Date.now() < until) {
    if (release.length) {
      released++
      release.shift()!()
    }
    await new Promise((r) => setTimeout(r, 5))
  }
  await settled
  t.equal(released, 6)
  t.equal(peak, 2, 'never more than 2 in flight to one endpoint')
  t.equal(rx.received.length, 6)

  const slow = await startReceiver(t, () => 'hang')
  const sid = (await call(api(m), { key, body: { name: 's', url: slow.url, timeoutMs: 200 } })).body.id
  await call(`${api(m)}/${sid}/send-test-event`, { key, body: {} })
  await engine.settle()
  t.match((await call(`${api(m)}/${sid}/deliveries`, { key })).body.data[0], { status: 'pending', attemptCount: 1, lastError: 'timed out' })
})
