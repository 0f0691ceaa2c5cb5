import t from 'tap'
import { call, startMeterd } from '../helpers/meterd.js'
import { completion, toolEvent } from '../fixtures/wire-examples.js'

const C = '/meter/v2/ai/completions'
const LIST = '/profitstream/v2/api/sources/metrics/ai/completions'

t.test('Idempotency-Key replays the first response and stores once', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const body = completion({ transactionId: undefined })
  delete body.transactionId
  const headers = { 'idempotency-key': 'go-sdk-6f1c2a3b' }
  const first = await call(m.url + C, { key, body, headers })
  t.equal(first.status, 201)
  const again = await call(m.url + C, { key, body, headers })
  t.equal(again.status, 201, 'replayed status')
  t.same(again.body, first.body, 'replayed body: same id and created')
  t.equal(again.headers.get('idempotent-replayed'), 'true')
  const list = await call(m.url + LIST, { key })
  t.equal(list.body.page.totalElements, 1, 'stored once')

  const other = await call(m.url + C, { key, body: { ...body, model: 'gpt-4o' }, headers })
  t.equal(other.status, 409)
  t.equal(other.body.error.code, 'idempotency_key_mismatch')
  t.equal(other.headers.get('x-should-retry'), 'false', 'Stainless clients are told not to retry')

  // Keys are per account: another account may use the same key for its own request.
  const otherAccount = await m.key({ account: 'acct-2', team: 'team-z' })
  const theirs = await call(m.url + C, { key: otherAccount, body: { ...body, model: 'gpt-4o' }, headers })
  t.equal(theirs.status, 201)
  t.not(theirs.body.id, first.body.id)
})

t.test('a second request with a key still in flight gets 409 in_progress with Retry-After: 1', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const headers = { 'idempotency-key': 'concurrent-1' }
  const body = completion()
  const results = await Promise.all(Array.from({ length: 8 }, () => call(m.url + C, { key, body, headers })))
  const created = results.filter((r) => r.status === 201)
  const inProgress = results.filter((r) => r.status === 409)
  t.ok(created.length >= 1, 'the first is stored')
  t.equal(created.length + inProgress.length, 8, 'every other answer is 201 (replay) or 409')
  for (const r of inProgress) {
    t.equal(r.body.error.code, 'idempotency_key_in_progress')
    t.equal(r.headers.get('retry-after'), '1')
  }
  t.equal(new Set(created.map((r) => r.body.id)).size, 1, 'every 201 carries the same id')
  const list = await call(m.url + LIST, { key })
  t.equal(list.body.page.totalElements, 1, 'stored once')
})

t.test('Idempotency-Key replay survives a restart and expires after 24 h', async (t) => {
  const start = Date.UTC(2026, 10, 21, 12)
  const m = await startMeterd(t, { frozenNow: start })
  const key = await m.key()
  const body = completion()
  delete body.transactionId
  const headers = { 'idempotency-key': 'ttl-check' }
  const first = await call(m.url + C, { key, body, headers })
  m.clock.advance(23 * 3_600_000)
  t.same((await call(m.url + C, { key, body, headers })).body, first.body, 'replayed within 24 h')
  m.clock.advance(2 * 3_600_000)
  const late = await call(m.url + C, { key, body, headers })
  t.equal(late.status, 201)
  t.not(late.body.id, first.body.id, 'after 24 h the key is fresh again')
})

t.test('transactionId dedup: a retry is acknowledged with the first id and stored once', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const body = completion()
  const first = await call(m.url + C, { key, body })
  const retry = await call(m.url + C, { key, body })
  t.equal(retry.status, 201)
  t.equal(retry.body.id, first.body.id, 'same id')

  // Concurrent retries (litellm resends the same transactionId on every retry).
  const racing = completion()
  const answers = await Promise.all(Array.from({ length: 10 }, () => call(m.url + C, { key, body: racing })))
  t.ok(answers.every((a) => a.status === 201), 'all acknowledged')
  t.equal(new Set(answers.map((a) => a.body.id)).size, 1, 'all with one id')

  // Within one batch, and across kinds: a tool event may share a completion's transactionId.
  const tx = `batch-${Date.now()}`
  const batch = await call(m.url + C, { key, body: [completion({ transactionId: tx }), completion({ transactionId: tx })] })
  t.equal(batch.status, 201)
  t.equal(batch.body.length, 2)
  t.equal(batch.body[0].id, batch.body[1].id, 'a duplicate inside a batch gets the first id')
  const tool = await call(`${m.url}/meter/v2/tool/events`, { key, body: toolEvent({ transactionId: tx }) })
  t.equal(tool.status, 201)
  t.not(tool.body.id, batch.body[0].id, 'dedup is per kind')

  const list = await call(m.url + LIST, { key })
  t.equal(list.body.page.totalElements, 3, 'three distinct completions stored')

  // Per account: another account's record with the same transactionId is its own.
  const other = await m.key({ account: 'acct-2', team: 'team-b' })
  const theirs = await call(m.url + C, { key: other, body })
  t.not(theirs.body.id, first.body.id)
})

t.test('after the dedup window a transactionId is new again, and its retries get the new id', async (t) => {
  const m = await startMeterd(t, { frozenNow: Date.UTC(2026, 10, 21, 12) })
  const key = await m.key()
  const body = completion()
  const first = await call(m.url + C, { key, body })
  m.clock.advance(23 * 3_600_000)
  t.equal((await call(m.url + C, { key, body })).body.id, first.body.id, 'within 24 h: the first id')
  m.clock.advance(2 * 3_600_000)
  const later = await call(m.url + C, { key, body })
  t.equal(later.status, 201)
  t.not(later.body.id, first.body.id, 'after 24 h: stored as a new record')
  t.equal((await call(m.url + C, { key, body })).body.id, later.body.id, 'and a retry of it gets its id')
  const list = await call(`${m.url}${LIST}?transactionId=${encodeURIComponent(body.transactionId)}`, { key })
  t.same(list.body._embedded.aICompletionMetricResourceList.map((r: any) => r.id).sort(), [first.body.id, later.body.id].sort(), 'both are stored')
})

t.test('an array is a batch: all-or-nothing, one answer per record', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const bad = await call(m.url + C, { key, body: [completion(), completion(), completion({ stopReason: 'NOPE' })] })
  t.equal(bad.status, 400)
  t.equal(bad.body.error.param, '[2].stopReason')
  t.equal((await call(m.url + LIST, { key })).body.page.totalElements, 0, 'nothing of a refused batch is stored')
  const ok = await call(m.url + C, { key, body: [completion(), completion()] })
  t.equal(ok.status, 201)
  t.equal(ok.body.length, 2)
  t.equal((await call(m.url + LIST, { key })).body.page.totalElements, 2)
})

t.test('read-back is scoped to the key’s team, pages, and filters by time and traceId', async (t) => {
  const m = await startMeterd(t)
  const a = await m.key({ team: 'team-a' })
  const b = await m.key({ team: 'team-b' })
  for (let i = 0; i < 5; i++) {
    const at = `2026-11-2${i}T10:00:00Z`
    await call(m.url + C, { key: a, body: completion({ requestTime: at, traceId: i % 2 ? 'odd' : 'even' }) })
  }
  await call(m.url + C, { key: b, body: completion() })
  const all = await call(`${m.url}${LIST}?size=2`, { key: a })
  t.same(all.body.page, { size: 2, totalElements: 5, totalPages: 3, number: 0 })
  t.same(all.body._embedded.aICompletionMetricResourceList.map((r: any) => r.requestTime), ['2026-11-24T10:00:00Z', '2026-11-23T10:00:00Z'], 'newest first')
  const last = await call(`${m.url}${LIST}?size=2&page=2`, { key: a })
  t.same(last.body._embedded.aICompletionMetricResourceList.map((r: any) => r.requestTime), ['2026-11-20T10:00:00Z'])
  const window = await call(`${m.url}${LIST}?from=2026-11-21T00:00:00Z&to=2026-11-23T10:00:00Z`, { key: a })
  t.same(window.body._embedded.aICompletionMetricResourceList.map((r: any) => r.requestTime), ['2026-11-22T10:00:00Z', '2026-11-21T10:00:00Z'], 'from inclusive, to exclusive')
  const odd = await call(`${m.url}${LIST}?traceId=odd`, { key: a })
  t.equal(odd.body.page.totalElements, 2, 'by traceId')
  const theirs = await call(`${m.url}${LIST}`, { key: b })
  t.equal(theirs.body.page.totalElements, 1, 'team b sees only its own record')
  const sameTeam = await call(`${m.url}${LIST}?teamId=team-a`, { key: a })
  t.equal(sameTeam.status, 200, 'teamId equal to the key’s team is fine')
})
