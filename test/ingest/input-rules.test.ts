/** Issue 15 #10: dates that do not exist, text that is not Unicode, charsets other than UTF-8. */
import t from 'tap'
import { call, startMeterd } from '../helpers/meterd.js'
import { completion, toolEvent } from '../fixtures/wire-examples.js'

const C = '/meter/v2/ai/completions'
const T = '/meter/v2/tool/events'
const LIST = '/profitstream/v2/api/sources/metrics/ai/completions'
const JSON_TYPE = { 'content-type': 'application/json' }

t.test('a date that does not exist is a 400, never rolled into the next month', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  for (const [path, body, param] of [
    [C, completion({ requestTime: '2026-02-30T10:00:00.000Z' }), 'requestTime'],
    [C, completion({ responseTime: '2026-04-31T10:00:00Z' }), 'responseTime'],
    [T, toolEvent({ timestamp: '2026-02-29T10:00:00+01:00' }), 'timestamp'],
  ] as const) {
    const res = await call(m.url + path, { key, body })
    t.equal(res.status, 400, `${param}`)
    t.match(res.body.error, { code: 'invalid_field', param })
  }
  const from = await call(`${m.url}${LIST}?from=2026-02-30T00:00:00Z`, { key })
  t.match(from.body.error, { code: 'invalid_parameter', param: 'from' }, 'in a query too')
  t.equal((await call(m.url + C, { key, body: completion({ requestTime: '2028-02-29T10:00:00.000Z' }) })).status, 201, 'a real leap day is fine')
})

t.test('a timestamp without an offset (Python\'s isoformat of a UTC time) is taken as UTC, as DESIGN reads "with or without fractions or offset"', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const tool = await call(m.url + T, { key, body: toolEvent({ timestamp: '2026-11-21T23:55:47.661000', transactionId: 'naive-tool' }) })
  t.equal(tool.status, 201, 'a tool event: 201, not a 400 asking for an ISO-8601 date-time')
  const done = await call(m.url + C, { key, body: completion({ requestTime: '2026-11-21T23:55:47', completionStartTime: '2026-11-21T23:55:48', responseTime: '2026-11-21T23:55:49', transactionId: 'naive-c' }) })
  t.equal(done.status, 201, 'a completion: 201')
  const read = await call(`${m.url}${LIST}?transactionId=naive-c&from=2026-11-21T23:55:47&to=2026-11-21T23:55:48`, { key })
  t.equal(read.status, 200, 'from and to without an offset are UTC too')
  t.equal(read.body._embedded.aICompletionMetricResourceList[0]?.eventTime, '2026-11-21T23:55:47.000Z', 'the event time is that UTC time')
  const events = await call(`${m.url}/profitstream/v2/api/sources/metrics/tool/events?transactionId=naive-tool`, { key })
  t.equal(events.body._embedded.toolEventMetricResourceList[0]?.eventTime, '2026-11-21T23:55:47.661Z')
  t.equal(events.body._embedded.toolEventMetricResourceList[0]?.timestamp, '2026-11-21T23:55:47.661000', 'the field as sent')
})

t.test('a read whose to is not later than its from is a 400 naming to, as the analytics answer it, not an empty page', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  t.equal((await call(m.url + C, { key, body: completion({ requestTime: '2026-11-25T10:00:00.000Z' }) })).status, 201)
  for (const path of [LIST, '/profitstream/v2/api/sources/metrics/tool/events', '/profitstream/v2/api/tools/unpriced-events']) {
    for (const q of ['from=2026-11-26T00:00:00Z&to=2026-11-25T00:00:00Z', 'from=2026-11-25T10:00:00Z&to=2026-11-25T11:00:00%2B01:00']) {
      const res = await call(`${m.url}${path}?${q}`, { key })
      t.equal(res.status, 400, `${path} ${q}`)
      t.match(res.body.error, { code: 'invalid_parameter', param: 'to', message: 'to must be later than from' })
    }
  }
  const fine = await call(`${m.url}${LIST}?from=2026-11-25T00:00:00Z&to=2026-11-26T00:00:00Z`, { key })
  t.equal(fine.body.page.totalElements, 1, 'a range in order still reads')
})

t.test('lone surrogates and bytes that are not UTF-8 are a 400, not stored as U+FFFD', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const text = JSON.stringify(completion({ agent: 'AGENT' }))
  for (const [what, raw] of [
    ['an escaped lone high surrogate', text.replace('AGENT', '\\ud800')],
    ['an escaped lone low surrogate', text.replace('AGENT', 'x\\uDC00y')],
    ['a lone surrogate in a key', text.replace('"agent"', '"\\ud83d"')],
    ['a surrogate encoded in UTF-8 bytes (CESU-8)', Buffer.concat([Buffer.from(text.slice(0, text.indexOf('AGENT'))), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from(text.slice(text.indexOf('AGENT') + 5))])],
    ['a Latin-1 byte', Buffer.concat([Buffer.from(text.slice(0, text.indexOf('AGENT'))), Buffer.from([0xe9]), Buffer.from(text.slice(text.indexOf('AGENT') + 5))])],
  ] as const) {
    const res = await call(m.url + C, { key, raw, headers: JSON_TYPE })
    t.equal(res.status, 400, what)
    t.equal(res.body.error.code, 'invalid_unicode', what)
  }
  // U+FFFD sent as its UTF-8 bytes is text like any other; beside a byte that is not UTF-8 it is still a 400.
  const fffd = await call(m.url + C, { key, raw: JSON.stringify(completion({ agent: 'A\ufffdB' })), headers: JSON_TYPE })
  t.equal(fffd.status, 201, 'U+FFFD as UTF-8 is stored')
  const both = Buffer.concat([Buffer.from(text.slice(0, text.indexOf('AGENT')) + '\ufffd'), Buffer.from([0xe9]), Buffer.from(text.slice(text.indexOf('AGENT') + 5))])
  const refused = await call(m.url + C, { key, raw: both, headers: JSON_TYPE })
  t.equal(refused.status, 400, 'U+FFFD beside a Latin-1 byte')
  t.equal(refused.body.error.code, 'invalid_unicode')
  const pair = await call(m.url + C, { key, raw: text.replace('AGENT', '\\ud83d\\ude00 and \\\\ud800 as text'), headers: JSON_TYPE })
  t.equal(pair.status, 201, 'an escaped surrogate pair, and an escaped backslash before "ud800", are fine')
  const stored = (await call(m.url + LIST, { key })).body._embedded.aICompletionMetricResourceList[0]
  t.equal(stored.agent, '😀 and \\ud800 as text', 'stored as sent')
})

t.test('a charset other than UTF-8 is a 415 naming it', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const body = JSON.stringify(completion())
  for (const type of ['application/json; charset=utf-16', 'application/json;charset="ISO-8859-1"', 'application/json; foo=bar; charset=latin1']) {
    const res = await call(m.url + C, { key, raw: body, headers: { 'content-type': type } })
    t.equal(res.status, 415, type)
    t.match(res.body.error, { code: 'unsupported_charset', param: 'Content-Type' })
    t.match(res.body.error.message, /charset (utf-16|iso-8859-1|latin1) is not supported/)
  }
  for (const type of ['application/json; charset=utf-8', 'application/json; charset=UTF-8', 'application/json;charset="utf8"']) {
    const res = await call(m.url + C, { key, raw: JSON.stringify(completion()), headers: { 'content-type': type } })
    t.equal(res.status, 201, type)
  }
})

t.test('a cost the client sends is at most 10^9 USD, as prices are: past it a 400 naming the field, nothing stored', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  for (const [path, body, param] of [
    [C, completion({ totalCost: 1e300 }), 'totalCost'],
    [C, completion({ inputTokenCost: 1000000000.5 }), 'inputTokenCost'],
    [C, completion({ outputTokenCost: 1e26 }), 'outputTokenCost'],
    [C, completion({ cacheReadTokenCost: 1e10 }), 'cacheReadTokenCost'],
    [C, completion({ cacheCreationTokenCost: 1e10 }), 'cacheCreationTokenCost'],
    [T, toolEvent({ costUsd: 1e300 }), 'costUsd'],
  ] as const) {
    const res = await call(m.url + path, { key, body })
    t.equal(res.status, 400, param)
    t.match(res.body.error, { type: 'invalid_request_error', code: 'invalid_field', param, message: /at most 1000000000/ }, param)
  }
  t.equal((await call(m.url + LIST, { key })).body.page.totalElements, 0, 'none of them stored')
  const summary = await call(`${m.url}/profitstream/v2/api/analytics/summary?from=2026-11-01T00:00:00Z&to=2026-12-01T00:00:00Z`, { key })
  t.equal(summary.body.period.cost, '0', 'no analytics sum carries them')
  const bound = await call(m.url + C, { key, body: completion({ totalCost: 1e9 }) })
  t.equal(bound.status, 201, 'a cost of 10^9 is taken')
  t.equal((await call(m.url + LIST, { key })).body._embedded.aICompletionMetricResourceList[0].cost.total, '1000000000')
})

t.test('durations are at most 2^53 - 1 ms and costMultiplier at most 10^9: past them a 400 naming the field, nothing stored', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  // Each was taken at 1e300 (201) and stored.
  for (const [path, body, param, bound] of [
    [C, completion({ requestDuration: 1e300 }), 'requestDuration', /at most 9007199254740991 \(ms\)/],
    [C, completion({ requestDuration: 2 ** 53 }), 'requestDuration', /at most 9007199254740991/],
    [C, completion({ timeToFirstToken: 1e300 }), 'timeToFirstToken', /at most 9007199254740991/],
    [C, completion({ mediationLatency: 1e20 }), 'mediationLatency', /at most 9007199254740991/],
    [C, completion({ costMultiplier: 1e300 }), 'costMultiplier', /at most 1000000000/],
    [T, toolEvent({ durationMs: 1e300 }), 'durationMs', /at most 9007199254740991 \(ms\)/],
  ] as const) {
    const res = await call(m.url + path, { key, body })
    t.equal(res.status, 400, param)
    t.match(res.body.error, { type: 'invalid_request_error', code: 'invalid_field', param, message: bound }, param)
  }
  t.equal((await call(m.url + LIST, { key })).body.page.totalElements, 0, 'none of them stored')
  const fine = await call(m.url + C, { key, body: completion({ requestDuration: Number.MAX_SAFE_INTEGER, costMultiplier: 1.5, timeToFirstToken: 12.5 }) })
  t.equal(fine.status, 201, 'at the bound, and fractions, are taken')
  t.equal((await call(m.url + T, { key, body: toolEvent({ durationMs: 0.25 }) })).status, 201)
})

t.test('a UTF-8 byte order mark before the JSON is ignored (RFC 8259 §8.1), on REST and OTLP/JSON alike', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const sent = completion()
  const res = await call(m.url + C, { key, raw: Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(JSON.stringify(sent))]), headers: JSON_TYPE })
  t.equal(res.status, 201, 'a BOM before a record')
  const stored = (await call(`${m.url}${LIST}?transactionId=${sent.transactionId}`, { key })).body._embedded.aICompletionMetricResourceList
  t.equal(stored.length, 1, 'stored once')
  const otlp = await call(m.url + '/meter/v2/otlp/v1/traces', { key, raw: '\ufeff{"resourceSpans":[]}', headers: JSON_TYPE })
  t.equal(otlp.status, 200, 'a BOM before an OTLP/JSON export')
  const twice = await call(m.url + C, { key, raw: '\ufeff\ufeff' + JSON.stringify(completion()), headers: JSON_TYPE })
  t.equal(twice.status, 400, 'only one mark, at the start')
  t.equal(twice.body.error.code, 'malformed_json')
  const inside = await call(m.url + C, { key, raw: '[\ufeff' + JSON.stringify(completion()) + ']', headers: JSON_TYPE })
  t.equal(inside.body.error.code, 'malformed_json', 'a mark inside the JSON is still refused')
})
