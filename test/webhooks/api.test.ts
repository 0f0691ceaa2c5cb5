import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { call, type Res } from '../helpers/meterd.js'
import { completion } from '../fixtures/wire-examples.js'
import { verifyWebhook } from '../../src/domain/webhooks/verify.js'
import { api, startReceiver, startWebhookMeterd } from '../helpers/webhook-receiver.js'

t.test('export configurations: CRUD, validation naming the field, team scoping, scopes', async (t) => {
  const { m } = await startWebhookMeterd(t)
  const key = await m.key({ team: 'team-a' })
  const other = await m.key({ team: 'team-b', account: 'acct-2' })
  const reader = await m.key({ team: 'team-a', scopes: ['platform:read'] })

  const created = await call(`${api(m)}?teamId=team-a`, {
    key,
    body: { name: 'billing', url: 'http://127.0.0.1:9/hook', eventTypes: ['usage.completion'], filters: { organizationName: 'Acme', agent: ['a1', 'a2'] }, batching: { maxEvents: 10, maxWaitMs: 2000 }, timeoutMs: 5000 },
  })
  t.equal(created.status, 201)
  t.match(created.body, {
    id: /^exp_/, teamId: 'team-a', name: 'billing', url: 'http://127.0.0.1:9/hook', enabled: true, eventTypes: ['usage.completion'],
    filters: { organizationName: ['Acme'], agent: ['a1', 'a2'] }, batching: { maxEvents: 10, maxWaitMs: 2000 }, timeoutMs: 5000,
    signing: { enabled: true, state: 'single', secretCreatedAt: new Date(m.clock.now).toISOString() },
    signingSecret: /^whsec_[A-Za-z0-9_-]{43}$/,
  })
  t.equal(created.headers.get('cache-control'), 'no-store', 'the answer with the secret is not cached')
  const id = created.body.id
  t.notOk('signingSecret' in (await call(`${api(m)}/${id}`, { key })).body, 'the secret is shown in the create answer only')
  const defaults = await call(api(m), { key, body: { name: 'defaults', url: 'http://127.0.0.1:9/x' } })
  t.match(defaults.body, { eventTypes: ['usage.completion', 'usage.tool'], filters: {}, batching: null, timeoutMs: 15000, enabled: true })

  const list = await call(`${api(m)}?teamId=team-a`, { key })
  t.equal(list.status, 200)
  t.same(list.body.data.map((c: any) => c.name).sort(), ['billing', 'defaults'])
  t.equal((await call(`${api(m)}/${id}?teamId=team-a`, { key })).body.name, 'billing')

  const patched = await call(`${api(m)}/${id}?teamId=team-a`, { key, method: 'PATCH', body: { enabled: false, name: 'billing-2' } })
  t.equal(patched.status, 200)
  t.match(patched.body, { enabled: false, name: 'billing-2', url: 'http://127.0.0.1:9/hook', timeoutMs: 5000 })
  const put = await call(`${api(m)}/${id}`, { key, method: 'PUT', body: { name: 'replaced', url: 'http://127.0.0.1:9/r' } })
  t.match(put.body, { name: 'replaced', enabled: true, batching: null, filters: {} })

  // Another team: its list is empty and our id does not exist for it.
  t.same((await call(`${api(m)}?teamId=team-b`, { key: other })).body.data, [])
  for (const [method, path] of [['GET', ''], ['PATCH', ''], ['DELETE', ''], ['POST', '/rotate-signing-secret'], ['POST', '/send-test-event'], ['GET', '/deliveries']] as const) {
    const r = await call(`${api(m)}/${id}${path}?teamId=team-b`, { key: other, method, body: method === 'GET' || method === 'DELETE' ? undefined : {} })
    t.equal(r.status, 404, `${method} ${path || '/'} of another team's id → 404`)
    t.equal(r.body.error.type, 'not_found_error')
  }
  t.equal((await call(`${api(m)}/${id}?teamId=team-b`, { key })).status, 403, 'teamId must be the key\'s team')
  t.equal((await call(`${api(m)}/exp_nope?teamId=team-a`, { key })).status, 404)

  // Scopes: reads need platform:read, writes platform:write.
  t.equal((await call(`${api(m)}/${id}`, { key: reader })).status, 200)
  t.equal((await call(api(m), { key: reader, body: { name: 'x', url: 'http://127.0.0.1:9/' } })).status, 403)
  t.equal((await call(`${api(m)}/${id}/rotate-signing-secret`, { key: reader, body: {} })).status, 403)
  t.equal((await call(api(m), {})).status, 401)

  const bad = async (body: unknown, param: string, code?: string) => {
    const r = await call(api(m), { key, body })
    t.equal(r.status, 400, `400 for ${JSON.stringify(body)}`)
    t.equal(r.body.error.param, param, `names ${param}`)
    t.equal(r.body.error.type, 'invalid_request_error')
    if (code) t.equal(r.body.error.code, code)
  }
  await bad({ url: 'http://127.0.0.1:9/' }, 'name')
  await bad({ name: 'x' }, 'url', 'invalid_url')
  await bad({ name: 'x', url: 'not a url' }, 'url', 'invalid_url')
  await bad({ name: 'x', url: 'ftp://example.com/x' }, 'url', 'invalid_url')
  await bad({ name: 'x', url: 'https://user:pw@example.com/x' }, 'url', 'invalid_url')
  await bad({ name: 'x', url: 'http://10.1.2.3/hook' }, 'url', 'destination_refused')
  await bad({ name: 'x', url: 'http://169.254.169.254/latest' }, 'url', 'destination_refused')
  await bad({ name: 'x', url: 'http://[::1]:8080/' }, 'url', 'destination_refused')
  await bad({ name: 'x', url: 'http://127.0.0.2/' }, 'url', 'destination_refused')
  await bad({ name: 'x', url: 'https://example.com/h', eventTypes: ['usage.completion', 'usage.nope'] }, 'eventTypes[1]', 'unknown_event_type')
  await bad({ name: 'x', url: 'https://example.com/h', eventTypes: [] }, 'eventTypes')
  await bad({ name: 'x', url: 'https://example.com/h', filters: { color: 'red' } }, 'filters.color', 'unknown_filter')
  await bad({ name: 'x', url: 'https://example.com/h', filters: { agent: 3 } }, 'filters.agent')
  // Every record is matched against these lists: 101 agents or a 300-character value are refused.
  await bad({ name: 'x', url: 'https://example.com/h', filters: { agent: Array.from({ length: 101 }, (_, i) => `a${i}`) } }, 'filters.agent')
  await bad({ name: 'x', url: 'https://example.com/h', filters: { model: 'm'.repeat(300) } }, 'filters.model')
  await bad({ name: 'x', url: 'https://example.com/h', batching: { maxEvents: 0 } }, 'batching.maxEvents')
  await bad({ name: 'x', url: 'https://example.com/h', timeoutMs: 'soon' }, 'timeoutMs')
  await bad({ name: 'x', url: 'https://example.com/h', enabled: 'yes' }, 'enabled')
  await bad({ name: 'x', url: 'https://example.com/h', signingEnabled: 'yes' }, 'signingEnabled')
  const notJson = await call(api(m), { key, raw: 'name=x', headers: { 'content-type': 'text/plain' } })
  t.equal(notJson.status, 415)
  const patchBad = await call(`${api(m)}/${id}`, { key, method: 'PATCH', body: { url: 'gopher://x' } })
  t.equal(patchBad.body.error.param, 'url')
  // Opting out at creation: no secret, unsigned, and no secret in the answer.
  const unsigned = await call(api(m), { key, body: { name: 'unsigned', url: 'http://127.0.0.1:9/u', signingEnabled: false } })
  t.equal(unsigned.status, 201)
  t.match(unsigned.body.signing, { enabled: false, state: 'off' })
  t.notOk('signingSecret' in unsigned.body)
  const signOnWithout = await call(`${api(m)}/${unsigned.body.id}`, { key, method: 'PATCH', body: { signingEnabled: true } })
  t.equal(signOnWithout.status, 400)
  t.equal(signOnWithout.body.error.code, 'no_signing_secret')
  const badRotate = await call(`${api(m)}/${id}/rotate-signing-secret`, { key, body: { immediate: 'yes' } })
  t.equal(badRotate.body.error.param, 'immediate')
  t.equal((await call(`${api(m)}/${id}/recover?since=yesterday`, { key, body: {} })).body.error.param, 'since')

  t.equal((await call(`${api(m)}/${id}`, { key, method: 'DELETE' })).status, 204)
  t.equal((await call(`${api(m)}/${id}`, { key })).status, 404, 'gone after delete')
})

t.test('rotation state table, with deliveries as the receiver sees them', async (t) => {
  const { m, engine } = await startWebhookMeterd(t)
  const rx = await startReceiver(t)
  const key = await m.key()
  // Starts from SPEC's "signing off" (opted out at creation; new configurations are signed by default).
  const id = (await call(api(m), { key, body: { name: 'r', url: rx.url, signingEnabled: false } })).body.id
  const state = async () => (await call(`${api(m)}/${id}`, { key })).body.signing
  const rotate = async (body?: unknown) => {
    const r = await call(`${api(m)}/${id}/rotate-signing-secret?teamId=team-a`, { key, body, method: 'POST' })
    t.equal(r.status, 200)
    t.match(r.body.signingSecret, /^whsec_[A-Za-z0-9_-]{43}$/)
    t.same(Object.keys(r.body), ['signingSecret'])
    return r.body.signingSecret as string
  }
  /** Sends a test event and returns the signature values the receiver got (or null when unsigned). */
  const deliver = async () => {
    const before = rx.received.length
    const r = await call(`${api(m)}/${id}/send-test-event?teamId=team-a`, { key, body: {} })
    t.equal(r.status, 202)
    await engine.settle()
    const got = (await rx.waitFor(before + 1))[before]
    t.equal(got.headers['x-service-webhook-id'], r.body.eventId, 'the event-id header is on every delivery')
    const sig = got.headers['x-service-signature-256'] as string | undefined
    if (sig === undefined) {
      t.equal(got.headers['x-service-webhook-timestamp'], undefined, 'unsigned: neither header')
      return null
    }
    t.equal(got.headers['x-service-webhook-timestamp'], String(Math.floor(m.clock.now / 1000)), 'timestamp = signing time (injectable clock)')
    return { values: sig.split(', '), got }
  }
  const verifies = (d: { got: { body: Buffer; headers: any } }, secret: string) =>
    verifyWebhook(d.got.body, d.got.headers, { secrets: secret, now: m.clock.now }).ok

  // signing off: delivered unchanged, no signing headers.
  t.match(await state(), { enabled: false, state: 'off' })
  t.equal(await deliver(), null)

  // off → rotate → signing on, single secret.
  const s1 = await rotate({})
  t.match(await state(), { enabled: true, state: 'single' })
  let d = (await deliver())!
  t.equal(d.values.length, 1)
  t.ok(verifies(d, s1))

  // single → rotate {} → overlap for 24 h, signed with both (new first).
  const s2 = await rotate({})
  t.not(s2, s1)
  const overlapStart = m.clock.now
  t.match(await state(), { state: 'overlap', overlapEndsAt: new Date(overlapStart + 24 * 3_600_000).toISOString() })
  d = (await deliver())!
  t.equal(d.values.length, 2, 'two values during the overlap')
  t.ok(verifies(d, s1) && verifies(d, s2), 'old and new receivers both verify')
  t.match(d.values[0], /^sha256=[0-9a-f]{64}$/)
  t.equal(verifyWebhook(d.got.body, { ...d.got.headers, 'x-service-signature-256': d.values[0] }, { secrets: s2, now: m.clock.now }).ok, true, 'the first value is the new secret')

  // overlap → 24 h elapse (clock advanced) → single (new).
  m.clock.advance(24 * 3_600_000 - 1000)
  t.equal((await state()).state, 'overlap', 'still overlapping just before 24 h')
  t.equal((await deliver())!.values.length, 2)
  m.clock.advance(1000)
  t.match(await state(), { state: 'single' })
  d = (await deliver())!
  t.equal(d.values.length, 1, 'back to one signature after 24 h')
  t.ok(verifies(d, s2))
  t.notOk(verifies(d, s1), 'the previous secret no longer verifies')

  // single → rotate {immediate: true} → single (new only).
  const s3 = await rotate({ immediate: true })
  t.match(await state(), { state: 'single' })
  d = (await deliver())!
  t.equal(d.values.length, 1)
  t.ok(verifies(d, s3))
  t.notOk(verifies(d, s2), 'immediate: the previous secret stops verifying at once')

  // A further rotation during an overlap drops the oldest at once: never more than two.
  const s4 = await rotate() // no body at all = {}
  const s5 = await rotate({})
  t.match(await state(), { state: 'overlap' })
  d = (await deliver())!
  t.equal(d.values.length, 2)
  t.ok(verifies(d, s5) && verifies(d, s4))
  t.notOk(verifies(d, s3), 'the oldest secret was dropped by the second rotation')

  // overlap → immediate → only the new one.
  const s6 = await rotate({ immediate: true })
  d = (await deliver())!
  t.equal(d.values.length, 1)
  t.ok(verifies(d, s6))
  t.notOk(verifies(d, s5))

  // Signing turned off, then rotated again: overlap with the secret that signed before.
  t.match((await call(`${api(m)}/${id}`, { key, method: 'PATCH', body: { signingEnabled: false } })).body.signing, { enabled: false, state: 'off' })
  t.equal(await deliver(), null, 'off again: unsigned')
  const s7 = await rotate({})
  d = (await deliver())!
  t.equal(d.values.length, 2, 'off → on with a prior secret: overlap')
  t.ok(verifies(d, s7) && verifies(d, s6))
})

t.test('rotate with "immediate": null is the default rotation (24 h overlap), as DESIGN takes null for absent, not a 400', async (t) => {
  const { m } = await startWebhookMeterd(t)
  const key = await m.key()
  const created = await call(api(m), { key, body: { name: 'n', url: 'http://127.0.0.1:9/n' } })
  t.equal(created.status, 201)
  const rotated = await call(`${api(m)}/${created.body.id}/rotate-signing-secret`, { key, body: { immediate: null } })
  t.equal(rotated.status, 200)
  t.match(rotated.body, { signingSecret: /^whsec_/ })
  const shown = await call(`${api(m)}/${created.body.id}`, { key })
  t.match(shown.body.signing, { enabled: true, state: 'overlap' }, 'the previous secret stays valid: not an immediate rotation')
})

t.test('send-test-event on a disabled configuration is a 409 saying so, not a 202 followed by a dead letter', async (t) => {
  const { m } = await startWebhookMeterd(t)
  const key = await m.key()
  const created = await call(api(m), { key, body: { name: 'n', url: 'http://127.0.0.1:9/n', enabled: false } })
  t.equal(created.status, 201, created.text)
  const sent = await call(`${api(m)}/${created.body.id}/send-test-event`, { key, body: {} })
  t.equal(sent.status, 409, sent.text)
  t.match(sent.body.error, { type: 'conflict_error', code: 'export_configuration_disabled', message: /is disabled.*PATCH \{"enabled": true\}/ })
  const listed = await call(`${api(m)}/${created.body.id}/deliveries`, { key })
  t.same(listed.body.data, [], 'no delivery was queued')
  t.equal((await call(`${api(m)}/${created.body.id}`, { key, method: 'PATCH', body: { enabled: true } })).status, 200)
  t.equal((await call(`${api(m)}/${created.body.id}/send-test-event`, { key, body: {} })).status, 202, 'enabled again: the test is sent')
})

t.test('the signing secret appears in exactly one response, in no other response and in no log line; encrypted at rest', async (t) => {
  const { m, engine } = await startWebhookMeterd(t, { exportconfigs: { master_key: 'test-master-key-0123456789' } })
  const rx = await startReceiver(t)
  const key = await m.key()
  const responses: Res[] = []
  const req = async (url: string, opts: Parameters<typeof call>[1] = {}) => {
    const r = await call(url, { key, ...opts })
    responses.push(r)
    return r
  }
  const create = await req(api(m), { body: { name: 's', url: rx.url } })
  const id = create.body.id
  const first = create.body.signingSecret as string
  const rot = await req(`${api(m)}/${id}/rotate-signing-secret`, { body: { immediate: true } })
  const secret = rot.body.signingSecret as string
  t.equal(rot.headers.get('cache-control'), 'no-store')
  await req(`${api(m)}/${id}`)
  await req(api(m))
  await req(`${api(m)}/${id}`, { method: 'PATCH', body: { name: 's2' } })
  const test = await req(`${api(m)}/${id}/send-test-event`, { body: {} })
  await engine.settle()
  await rx.waitFor(1)
  t.ok(verifyWebhook(rx.received[0].body, rx.received[0].headers, { secrets: secret, now: m.clock.now }).ok, 'deliveries are signed with the decrypted secret')
  await req(`${api(m)}/${id}/deliveries`)
  await req(`${api(m)}/${id}/deliveries/${test.body.deliveryId}`)
  await req(`${api(m)}/${id}/recover?since=2020-01-01T00:00:00Z`, { body: {} })
  await req(`${m.url}/metrics`)
  await req(`${m.url}/profitstream/v2/api/export-configurations/${id}/nope`)

  for (const [s, answer] of [[first, create], [secret, rot]] as const) {
    const containing = responses.filter((r) => r.text.includes(s) || [...r.headers.values()].some((v) => v.includes(s)))
    t.equal(containing.length, 1, 'exactly one response carries each secret')
    t.equal(containing[0], answer, 'the create answer (first secret) or the rotate answer')
    const secretPart = s.slice('whsec_'.length)
    t.equal(m.logs.filter((l) => l.includes(secretPart)).length, 0, 'no log line contains it')
    // At rest: the LMDB files never hold the secret in clear when a master key is configured.
    const files = readdirSync(m.dataDir).map((f) => readFileSync(join(m.dataDir, f)))
    t.ok(files.length > 0)
    t.notOk(files.some((b) => b.includes(Buffer.from(secretPart))), 'the secret is not stored in clear')
  }
  t.ok(m.logs.length > 0, 'logs were captured')
})

t.test('a new configuration is signed from its first delivery with the secret its create answer showed', async (t) => {
  const { m, engine } = await startWebhookMeterd(t)
  const rx = await startReceiver(t)
  const key = await m.key()
  const created = await call(api(m), { key, body: { name: 'signed', url: rx.url } })
  t.equal(created.status, 201)
  t.match(created.body.signing, { enabled: true, state: 'single' })
  t.equal((await call(`${m.url}/meter/v2/ai/completions`, { key, body: completion() })).status, 201)
  await engine.settle()
  const [first] = await rx.waitFor(1)
  t.equal(first.json.type, 'usage.completion', 'the first event ever delivered…')
  t.match(first.headers['x-service-signature-256'], /^sha256=[0-9a-f]{64}$/, '…carries one signature')
  t.ok(verifyWebhook(first.body, first.headers, { secrets: created.body.signingSecret, now: m.clock.now }).ok, 'which verifies with the secret of the create answer')
})

t.test('a body naming another team is a 403 team_mismatch, not a configuration made in the key\'s team', async (t) => {
  const { m } = await startWebhookMeterd(t)
  const key = await m.key({ team: 'team-a' })
  const refused = await call(api(m), { key, body: { name: 'b', url: 'http://127.0.0.1:9/hook', teamId: 'team-b' } })
  t.equal(refused.status, 403)
  t.match(refused.body.error, { type: 'permission_error', code: 'team_mismatch', param: 'teamId' })
  t.same((await call(api(m), { key })).body.data, [], 'nothing was created')
  const own = await call(api(m), { key, body: { name: 'a', url: 'http://127.0.0.1:9/hook', teamId: 'team-a' } })
  t.equal(own.status, 201, 'the key\'s own team may be repeated')
  for (const method of ['PATCH', 'PUT']) {
    const res = await call(`${api(m)}/${own.body.id}`, { method, key, body: { name: 'x', url: 'http://127.0.0.1:9/hook', team: 'team-b' } })
    t.equal(res.status, 403, method)
    t.equal(res.body.error.code, 'team_mismatch')
  }
  t.equal((await call(`${api(m)}/${own.body.id}`, { key })).body.name, 'a', 'unchanged')
})

t.test('a burst of creations stops at max_configurations_per_team: configurations still being written count', async (t) => {
  const { m } = await startWebhookMeterd(t, { exportconfigs: { max_configurations_per_team: 3 } })
  const key = await m.key({ team: 'team-a' })
  const other = await m.key({ team: 'team-b', account: 'acct-2' })
  const body = { name: 'hook', url: 'http://127.0.0.1:9/hook' }
  const answers = await Promise.all(Array.from({ length: 12 }, () => call(api(m), { key, body })))
  t.same(answers.filter((r) => r.status === 201).length, 3, 'three created')
  const refused = answers.filter((r) => r.status === 422)
  t.equal(refused.length, 9, 'the rest refused')
  t.match(refused[0].body.error, { type: 'invalid_request_error', code: 'too_many_export_configurations', message: /at most 3 .*max_configurations_per_team/ })
  t.equal((await call(api(m), { key })).body.page.totalElements, 3)
  t.equal((await call(api(m), { key, body })).status, 422, 'and the next one too')
  t.equal((await call(api(m), { key: other, body })).status, 201, 'another team has its own limit')
  const first = answers.find((r) => r.status === 201)!.body.id
  t.equal((await call(`${api(m)}/${first}`, { key, method: 'DELETE' })).status, 204)
  t.equal((await call(api(m), { key, body })).status, 201, 'a deletion makes room')
})
