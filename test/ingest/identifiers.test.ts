/**
 * Issue 15 #5 and #6: identifiers are checked before any store sees them — a 400 naming the
 * parameter, never a 503 — and a tool event's toolId is letters, digits, - and _ (SPEC Tool).
 */
import t from 'tap'
import { call, startMeterd } from '../helpers/meterd.js'
import { completion, toolEvent } from '../fixtures/wire-examples.js'

const C = '/meter/v2/ai/completions'
const T = '/meter/v2/tool/events'
const LIST = '/profitstream/v2/api/sources/metrics'

t.test('an oversized transactionId is a 400 naming it, in completions, tool events and batches', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  for (const tx of ['t'.repeat(4075), 't'.repeat(256), '€'.repeat(700), '😀'.repeat(200)]) {
    for (const [path, body] of [
      [C, completion({ transactionId: tx })],
      [T, toolEvent({ transactionId: tx })],
    ] as const) {
      const res = await call(m.url + path, { key, body })
      t.equal(res.status, 400, `${path}, ${tx.length} UTF-16 units, ${Buffer.byteLength(tx)} bytes: 400`)
      t.match(res.body.error, { code: 'invalid_field', param: 'transactionId' })
    }
  }
  const batch = await call(m.url + C, { key, body: [completion(), completion({ transactionId: 'x'.repeat(5000) })] })
  t.match(batch.body.error, { code: 'invalid_field', param: '[1].transactionId' })
  const withKey = await call(m.url + C, { key, body: completion({ transactionId: 'x'.repeat(5000) }), headers: { 'idempotency-key': 'long-tx' } })
  t.equal(withKey.status, 400, 'with an Idempotency-Key too')
  const fits = await call(m.url + C, { key, body: completion({ transactionId: '€'.repeat(255) }) })
  t.equal(fits.status, 201, '255 three-byte characters fit')
  t.equal((await call(m.url + LIST + '/ai/completions', { key })).body.page.totalElements, 1, 'nothing else was stored')
})

t.test('oversized identifier filters are a 400 naming them', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  for (const [kind, param] of [
    ['ai/completions', 'transactionId'],
    ['ai/completions', 'traceId'],
    ['tool/events', 'transactionId'],
    ['tool/events', 'traceId'],
    ['tool/events', 'toolId'],
  ]) {
    const res = await call(`${m.url}${LIST}/${kind}?${param}=${'x'.repeat(10_000)}`, { key })
    t.equal(res.status, 400, `${kind}?${param}=<10,000 characters>`)
    t.match(res.body.error, { code: 'invalid_parameter', param })
  }
  const unpriced = await call(`${m.url}/profitstream/v2/api/tools/unpriced-events?toolId=${'x'.repeat(10_000)}`, { key })
  t.match(unpriced.body.error, { code: 'invalid_parameter', param: 'toolId' })
})

t.test('a tool event’s toolId holds letters, digits, - and _ only', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  for (const toolId of ['web search', 'web/search', 'wéb', 'web.search', 'x'.repeat(256)]) {
    const res = await call(m.url + T, { key, body: toolEvent({ toolId }) })
    t.equal(res.status, 400, JSON.stringify(toolId.slice(0, 20)))
    t.match(res.body.error, { code: 'invalid_field', param: 'toolId' })
  }
  t.equal((await call(m.url + T, { key, body: toolEvent({ toolId: 'Web_search-2' }) })).status, 201)
})
