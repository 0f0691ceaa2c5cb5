import t from 'tap'
import { call, startMeterd } from '../helpers/meterd.js'
import { completionExamples, toolExamples } from '../fixtures/wire-examples.js'

const prefix = '/profitstream/v2/api/sources/metrics'

t.test('every wire-contract example is accepted and reads back field for field', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  for (const [name, body] of Object.entries(completionExamples)) {
    const res = await call(`${m.url}/meter/v2/ai/completions`, { key, body })
    t.equal(res.status, 201, `${name}: 201`)
    t.match(res.body, { id: String, resourceType: 'metering', label: 'ai.completion', signature: /^sha256:[0-9a-f]{64}$/, created: String }, `${name}: ack shape`)
    const back = await call(`${m.url}${prefix}/ai/completions?transactionId=${encodeURIComponent(body.transactionId)}`, { key })
    t.equal(back.status, 200)
    const list = back.body._embedded.aICompletionMetricResourceList
    t.equal(list.length, 1, `${name}: one record`)
    t.equal(list[0].id, res.body.id, `${name}: same id`)
    for (const [field, value] of Object.entries(body)) t.same(list[0][field], value, `${name}: ${field}`)
  }
  for (const [name, body] of Object.entries(toolExamples)) {
    for (const path of ['/meter/v2/tool/events']) {
      const res = await call(`${m.url}${path}`, { key, body })
      t.equal(res.status, 201, `${name}: 201`)
      t.equal(res.body.label, 'tool.event')
      const back = await call(`${m.url}${prefix}/tool/events?toolId=${body.toolId}`, { key })
      const list = back.body._embedded.toolEventMetricResourceList
      t.equal(list.length, 1, `${name}: listed by toolId`)
      for (const [field, value] of Object.entries(body)) t.same(list[0][field], value, `${name}: ${field}`)
    }
  }
})

t.test('any JSON spelling of a body reads back as its JSON value; legacy fields are dropped', async (t) => {
  const { completion } = await import('../fixtures/wire-examples.js')
  const m = await startMeterd(t)
  const key = await m.key()
  const base = completion()
  // Hand-written JSON: pretty-printed, escapes, exponents, unicode, nesting, an unknown key.
  const text = JSON.stringify(base, null, 2).replace(/\n}$/, `,
  "note": "line\\nbreak \\"quoted\\" \\u00e9t\\u00e9 \\ud83d\\ude00 tab\\t",
  "sci": 1.5e3,
  "neg": -0.000001,
  "deep": {"a": [1, [2, {"b": null}]], "empty": {}, "list": []},
  "unicode": "日本語"
}`)
  const res = await call(`${m.url}/meter/v2/ai/completions`, { key, raw: text, headers: { 'content-type': 'application/json' } })
  t.equal(res.status, 201)
  const back = await call(`${m.url}${prefix}/ai/completions?transactionId=${encodeURIComponent(base.transactionId)}`, { key })
  const stored = back.body._embedded.aICompletionMetricResourceList[0]
  for (const [field, value] of Object.entries(JSON.parse(text))) t.same(stored[field], value, field)
  t.equal(stored.note, 'line\nbreak "quoted" été 😀 tab\t')
  t.equal(stored.sci, 1500)

  // A completion with a legacy field is stored without it (the object, not the text, is kept).
  const legacy = completion({ organizationId: 'old-org' })
  t.equal((await call(`${m.url}/meter/v2/ai/completions`, { key, body: legacy })).status, 201)
  const back2 = await call(`${m.url}${prefix}/ai/completions?transactionId=${encodeURIComponent(legacy.transactionId)}`, { key })
  t.equal(back2.body._embedded.aICompletionMetricResourceList[0].organizationId, undefined, 'organizationId dropped')
})

t.test('gzip and deflate request bodies are accepted', async (t) => {
  const { gzipSync, deflateSync } = await import('node:zlib')
  const { completion } = await import('../fixtures/wire-examples.js')
  const m = await startMeterd(t)
  const key = await m.key()
  for (const [encoding, pack] of [['gzip', gzipSync], ['deflate', deflateSync]] as const) {
    const body = completion()
    const res = await call(`${m.url}/meter/v2/ai/completions`, {
      key,
      raw: pack(Buffer.from(JSON.stringify(body))),
      headers: { 'content-type': 'application/json; charset=utf-8', 'content-encoding': encoding },
    })
    t.equal(res.status, 201, `${encoding}: 201`)
    const back = await call(`${m.url}${prefix}/ai/completions?transactionId=${body.transactionId}`, { key })
    t.equal(back.body._embedded.aICompletionMetricResourceList[0]?.model, body.model, `${encoding}: stored as sent`)
  }
})
