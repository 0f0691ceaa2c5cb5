import { connect } from 'node:net'
import { gzipSync } from 'node:zlib'
import t, { type Test } from 'tap'
import { call, startMeterd, type Res } from '../helpers/meterd.js'
import { completion, toolEvent } from '../fixtures/wire-examples.js'

const without = (body: Record<string, unknown>, field: string) => {
  const b = { ...body }
  delete b[field]
  return b
}
const deep = (n: number): unknown => (n === 0 ? 1 : { a: deep(n - 1) })

interface Case {
  name: string
  path?: string
  body?: unknown
  raw?: string | Buffer
  headers?: Record<string, string>
  method?: string
  key?: 'none' | 'unknown' | 'readonly'
  status: number
  code: string
  param?: string
}

const C = '/meter/v2/ai/completions'
const T = '/meter/v2/tool/events'
const REQUIRED_COMPLETION = ['model', 'provider', 'inputTokenCount', 'outputTokenCount', 'totalTokenCount', 'stopReason', 'requestTime', 'completionStartTime', 'responseTime', 'requestDuration']

const cases: Case[] = [
  ...REQUIRED_COMPLETION.map((f) => ({ name: `completion without ${f}`, body: without(completion(), f), status: 400, code: 'missing_field', param: f })),
  ...['toolId', 'timestamp'].map((f) => ({ name: `tool event without ${f}`, path: T, body: without(toolEvent(), f), status: 400, code: 'missing_field', param: f })),
  { name: 'model is a number', body: completion({ model: 42 }), status: 400, code: 'invalid_field', param: 'model' },
  { name: 'provider is empty', body: completion({ provider: '' }), status: 400, code: 'invalid_field', param: 'provider' },
  { name: 'negative inputTokenCount', body: completion({ inputTokenCount: -1 }), status: 400, code: 'invalid_field', param: 'inputTokenCount' },
  { name: 'fractional inputTokenCount', body: completion({ inputTokenCount: 1.5 }), status: 400, code: 'invalid_field', param: 'inputTokenCount' },
  { name: 'outputTokenCount as a string', body: completion({ outputTokenCount: '5' }), status: 400, code: 'invalid_field', param: 'outputTokenCount' },
  { name: 'totalTokenCount as a boolean', body: completion({ totalTokenCount: true }), status: 400, code: 'invalid_field', param: 'totalTokenCount' },
  { name: 'unknown stopReason', body: completion({ stopReason: 'STOP' }), status: 400, code: 'invalid_field', param: 'stopReason' },
  { name: 'lower-case stopReason', body: completion({ stopReason: 'end' }), status: 400, code: 'invalid_field', param: 'stopReason' },
  { name: 'unknown operationType', body: completion({ operationType: 'CHATTING' }), status: 400, code: 'invalid_field', param: 'operationType' },
  { name: 'requestTime is not a time', body: completion({ requestTime: 'yesterday' }), status: 400, code: 'invalid_field', param: 'requestTime' },
  { name: 'responseTime month 13', body: completion({ responseTime: '2026-13-01T00:00:00Z' }), status: 400, code: 'invalid_field', param: 'responseTime' },
  // Without an offset it is UTC (DESIGN: "with or without fractions or offset"); a zone's name is no offset.
  { name: 'completionStartTime with a zone name', body: completion({ completionStartTime: '2026-11-21T23:55:47 UTC' }), status: 400, code: 'invalid_field', param: 'completionStartTime' },
  { name: 'requestTime as epoch millis', body: completion({ requestTime: 1795305494866 }), status: 400, code: 'invalid_field', param: 'requestTime' },
  { name: 'negative requestDuration', body: completion({ requestDuration: -5 }), status: 400, code: 'invalid_field', param: 'requestDuration' },
  { name: 'responseQualityScore above 1', body: completion({ responseQualityScore: 1.5 }), status: 400, code: 'invalid_field', param: 'responseQualityScore' },
  { name: 'isStreamed as a string', body: completion({ isStreamed: 'yes' }), status: 400, code: 'invalid_field', param: 'isStreamed' },
  { name: 'subscriber as a string', body: completion({ subscriber: 'u-1' }), status: 400, code: 'invalid_field', param: 'subscriber' },
  { name: 'subscriber.id as a number', body: completion({ subscriber: { id: 5 } }), status: 400, code: 'invalid_field', param: 'subscriber.id' },
  { name: 'subscriber.credential.name as a list', body: completion({ subscriber: { credential: { name: [] } } }), status: 400, code: 'invalid_field', param: 'subscriber.credential.name' },
  { name: 'empty transactionId', body: completion({ transactionId: '' }), status: 400, code: 'invalid_field', param: 'transactionId' },
  { name: 'transactionId over 255 characters', body: completion({ transactionId: 'x'.repeat(256) }), status: 400, code: 'invalid_field', param: 'transactionId' },
  { name: 'negative totalCost', body: completion({ totalCost: -1 }), status: 400, code: 'invalid_field', param: 'totalCost' },
  { name: 'billingSkipped as a string', body: completion({ billingSkipped: 'true' }), status: 400, code: 'invalid_field', param: 'billingSkipped' },
  { name: 'unknown skipReason', body: completion({ skipReason: 'NOPE' }), status: 400, code: 'invalid_field', param: 'skipReason' },
  { name: 'traceType with a space', body: completion({ traceType: 'has space' }), status: 400, code: 'invalid_field', param: 'traceType' },
  { name: 'attributes as a string', body: completion({ attributes: 'x' }), status: 400, code: 'invalid_field', param: 'attributes' },
  { name: 'negative reasoningTokenCount', body: completion({ reasoningTokenCount: -3 }), status: 400, code: 'invalid_field', param: 'reasoningTokenCount' },
  { name: 'empty toolId', path: T, body: toolEvent({ toolId: '' }), status: 400, code: 'invalid_field', param: 'toolId' },
  { name: 'tool timestamp not a time', path: T, body: toolEvent({ timestamp: 'not a time' }), status: 400, code: 'invalid_field', param: 'timestamp' },
  { name: 'durationMs as a string', path: T, body: toolEvent({ durationMs: 'fast' }), status: 400, code: 'invalid_field', param: 'durationMs' },
  { name: 'success as a string', path: T, body: toolEvent({ success: 'false' }), status: 400, code: 'invalid_field', param: 'success' },
  { name: 'negative costUsd', path: T, body: toolEvent({ costUsd: -0.5 }), status: 400, code: 'invalid_field', param: 'costUsd' },
  { name: 'usageMetadata as a list', path: T, body: toolEvent({ usageMetadata: [1, 2] }), status: 400, code: 'invalid_field', param: 'usageMetadata' },
  { name: 'reserved agenticJobId', path: T, body: toolEvent({ agenticJobId: 'types' }), status: 400, code: 'invalid_field', param: 'agenticJobId' },
  { name: 'tool event on the litellm alias, bad toolId', path: '/tool/events', body: toolEvent({ toolId: 7 }), status: 400, code: 'invalid_field', param: 'toolId' },
  // The body as a whole
  { name: 'not JSON', raw: '{"model": ', headers: { 'content-type': 'application/json' }, status: 400, code: 'malformed_json' },
  { name: 'empty body', raw: '', headers: { 'content-type': 'application/json' }, status: 400, code: 'empty_body' },
  { name: 'text/plain content type', raw: JSON.stringify(completion()), headers: { 'content-type': 'text/plain' }, status: 415, code: 'unsupported_media_type' },
  { name: 'no content type', raw: JSON.stringify(completion()), status: 415, code: 'unsupported_media_type' },
  { name: 'bad gzip', raw: Buffer.from('definitely not gzip'), headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' }, status: 400, code: 'bad_encoding' },
  { name: 'unsupported content-encoding', raw: JSON.stringify(completion()), headers: { 'content-type': 'application/json', 'content-encoding': 'br' }, status: 415, code: 'unsupported_content_encoding' },
  { name: 'body over 1 MiB', raw: JSON.stringify(completion({ pad: 'x'.repeat(1_100_000) })), headers: { 'content-type': 'application/json' }, status: 413, code: 'body_too_large' },
  { name: 'gzip bomb over 1 MiB inflated', raw: gzipSync(JSON.stringify(completion({ pad: ' '.repeat(5_000_000) }))), headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' }, status: 413, code: 'body_too_large' },
  { name: 'nesting 100 levels deep', body: completion({ attributes: deep(100) }), status: 400, code: 'nesting_too_deep' },
  { name: 'a JSON number', body: 42, status: 400, code: 'invalid_body' },
  { name: 'a JSON string', body: 'hello', status: 400, code: 'invalid_body' },
  { name: 'null', raw: 'null', headers: { 'content-type': 'application/json' }, status: 400, code: 'invalid_body' },
  { name: 'array with a non-object', body: [completion(), 'x'], status: 400, code: 'invalid_body', param: '[1]' },
  { name: 'array with one bad record', body: [completion(), completion({ model: 7 })], status: 400, code: 'invalid_field', param: '[1].model' },
  { name: 'a required field sent as null', body: [completion(), completion({ model: null })], status: 400, code: 'missing_field', param: '[1].model' },
  { name: 'empty array', body: [], status: 400, code: 'empty_batch' },
  { name: 'array over the batch limit', body: Array.from({ length: 1001 }, () => ({})), status: 413, code: 'batch_too_large' },
  // Authentication, scopes, headers, routes
  { name: 'unknown API key', key: 'unknown', body: completion(), status: 401, code: 'invalid_api_key' },
  { name: 'no API key', key: 'none', body: completion(), status: 401, code: 'missing_api_key' },
  { name: 'unknown Bearer token', key: 'none', headers: { authorization: 'Bearer hak_nope_0000000000000000' }, body: completion(), status: 401, code: 'invalid_api_key' },
  { name: 'key without metering:write', key: 'readonly', body: completion(), status: 403, code: 'insufficient_scope' },
  { name: 'Idempotency-Key with a space', headers: { 'idempotency-key': 'a b' }, body: completion(), status: 400, code: 'invalid_idempotency_key', param: 'Idempotency-Key' },
  { name: 'Idempotency-Key over 255 characters', headers: { 'idempotency-key': 'k'.repeat(256) }, body: completion(), status: 400, code: 'invalid_idempotency_key', param: 'Idempotency-Key' },
  { name: 'GET on a POST route', method: 'GET', status: 405, code: 'method_not_allowed' },
  { name: 'unknown metering route', path: '/meter/v2/ai/nothing', body: completion(), status: 404, code: 'route_not_found' },
  { name: 'unknown operations route', path: '/nothing', key: 'none', method: 'GET', status: 404, code: 'route_not_found' },
  { name: 'read-back with a bad page size', path: '/profitstream/v2/api/sources/metrics/ai/completions?size=0', method: 'GET', status: 400, code: 'invalid_parameter', param: 'size' },
  { name: 'read-back with a hexadecimal page', path: '/profitstream/v2/api/sources/metrics/ai/completions?page=0x10', method: 'GET', status: 400, code: 'invalid_parameter', param: 'page' },
  { name: 'tool list with an exponent size', path: '/profitstream/v2/api/tools?size=1e2', method: 'GET', status: 400, code: 'invalid_parameter', param: 'size' },
  { name: 'trace list with a signed page', path: '/profitstream/v2/api/analytics/traces?page=%2B1', method: 'GET', status: 400, code: 'invalid_parameter', param: 'page' },
  { name: 'read-back with a bad from', path: '/profitstream/v2/api/sources/metrics/ai/completions?from=soon', method: 'GET', status: 400, code: 'invalid_parameter', param: 'from' },
  { name: "read-back with another team's teamId", path: '/profitstream/v2/api/sources/metrics/ai/completions?teamId=team-b', method: 'GET', status: 403, code: 'team_mismatch', param: 'teamId' },
]

function checkShape(t: Test, res: Res, c: Case): void {
  t.equal(res.status, c.status, 'status')
  t.equal(res.headers.get('content-type'), 'application/json', 'JSON error body')
  t.match(res.body, { error: { type: String, code: c.code, message: String, doc_url: /^https?:\/\/.+#/ } }, 'error shape')
  if (c.param !== undefined) t.equal(res.body?.error?.param, c.param, 'param names the field')
}

t.test(`${cases.length} bad inputs each get the right 4xx in the error shape`, async (t) => {
  t.ok(cases.length >= 40, 'at least 40 cases')
  // So many 4xx in a row would trip error-pattern protection (tested in test/ratelimit); here each answer is the point.
  const m = await startMeterd(t, { config: { extensions: { ratelimit: { error_pattern: { enabled: false } } } } })
  const key = await m.key()
  const readonly = await m.key({ scopes: ['analytics:read'] })
  for (const c of cases) {
    await t.test(c.name, async (t) => {
      const k = c.key === 'none' ? undefined : c.key === 'unknown' ? 'hak_default_unknownunknownunknown' : c.key === 'readonly' ? readonly : key
      const res = await call(m.url + (c.path ?? C), { key: k, body: c.body, raw: c.raw, headers: c.headers, method: c.method })
      checkShape(t, res, c)
    })
  }
  // Nothing above was stored, and the daemon still serves.
  const ok = await call(m.url + C, { key, body: completion() })
  t.equal(ok.status, 201, 'still serving after every bad input')
  const stored = await call(`${m.url}/profitstream/v2/api/sources/metrics/ai/completions`, { key })
  t.equal(stored.body.page.totalElements, 1, 'no bad input was stored')
  const metrics = await call(`${m.url}/metrics`)
  t.match(metrics.text, /meterd_component_refused_items_total\{kind="processor",component="validate"\} [1-9]/, 'refusals are counted')
})

t.test('unknown keys are kept, null/absent/0 are legal, legacy aliases are dropped', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const body = completion({
    brandNewField: { nested: [1, 'two'] },
    reasoningTokenCount: null,
    cacheReadTokenCount: 0,
    timeToFirstToken: null,
    organizationId: 'LegacyOrg',
    productId: 'LegacyProduct',
    provider: 'OPENAI',
    requestTime: '2026-11-21T23:55:47+02:00',
  })
  delete body.productName
  const res = await call(`${m.url}${C}?teamId=whatever&tenantId=x`, { key, body })
  t.equal(res.status, 201)
  const back = await call(`${m.url}/profitstream/v2/api/sources/metrics/ai/completions?transactionId=${body.transactionId}`, { key })
  const r = back.body._embedded.aICompletionMetricResourceList[0]
  t.same(r.brandNewField, { nested: [1, 'two'] }, 'unknown key kept verbatim')
  t.equal(r.reasoningTokenCount, null)
  t.equal(r.cacheReadTokenCount, 0)
  t.notOk('organizationId' in r, 'organizationId dropped')
  t.notOk('productId' in r, 'productId dropped')
  t.equal(r.organizationName, 'AcmeOrg', 'the alias never overwrites the name')
  t.equal(r.attributed, false, 'missing productName → stored unattributed')
  t.equal(r.eventTime, '2026-11-21T21:55:47.000Z', 'offset timestamps are normalised to UTC')
})

t.test('strict_attribution turns a missing productName into a 400', async (t) => {
  const m = await startMeterd(t, { config: { processors: { validate: { strict_attribution: true }, attribution: {} } } })
  const key = await m.key()
  const body = completion()
  delete body.productName
  const res = await call(m.url + C, { key, body })
  t.equal(res.status, 400)
  t.equal(res.body.error.param, 'productName')
})

t.test('malformed HTTP gets a 400 and the daemon keeps serving', async (t) => {
  const m = await startMeterd(t)
  const port = Number(new URL(m.url).port)
  const reply = await new Promise<string>((resolve) => {
    const s = connect(port, '127.0.0.1', () => s.write('GARBAGE / NOT-HTTP\r\n\r\n'))
    let out = ''
    s.on('data', (d) => (out += d))
    s.on('close', () => resolve(out))
  })
  t.match(reply, /^HTTP\/1\.1 400/)
  t.match(reply, /"code":"bad_http"/)
  t.equal((await call(`${m.url}/healthz`)).status, 200)
})
