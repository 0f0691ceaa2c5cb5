import t from 'tap'
import { call, startMeterd } from '../helpers/meterd.js'
import { fixture, jsonSpans } from '../helpers/otlp.js'

// The routing connector, filter and attributes processors on spans: OTLP traces routed by span
// attributes, GenAI spans to the genai connector, the rest redacted and logged.

t.test('spans are routed by attribute; item rejections name the client’s span index; span attributes are redacted', async (t) => {
  const m = await startMeterd(t, {
    config: {
      connectors: { routing: { table: [{ condition: 'attributes.gen_ai.request.model exists', pipelines: ['traces/genai'] }], default_pipelines: ['traces/other'] } },
      processors: {
        'filter/health': { drop: 'name =~ "^health" or resource.service.name == "probe"' },
        'attributes/spans': { actions: [{ key: 'attributes.http.request.header.authorization', action: 'delete' }, { key: 'resource.deployment.region', value: 'eu-west-1', action: 'insert' }, { key: 'resource.revenium.organization.name', action: 'delete' }] },
      },
      exporters: { debug: { verbosity: 'detailed' } },
      service: {
        pipelines: {
          traces: { receivers: ['otlp'], exporters: ['routing'] },
          'traces/genai': { receivers: ['routing'], exporters: ['genai'] },
          'traces/other': { receivers: ['routing'], processors: ['filter/health', 'attributes/spans'], exporters: ['debug'] },
        },
      },
    },
  })
  const key = await m.key()
  const good = fixture('traces-genai-openai.json').resourceSpans[0].scopeSpans[0].spans[0]
  const bad = fixture('traces-bad.json').resourceSpans[0].scopeSpans[0].spans[0] // negative input tokens
  const plain = { traceId: 'e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1', spanId: '0000000000000b01', name: 'GET /orders', attributes: [{ key: 'http.request.header.authorization', value: { stringValue: 'Bearer secret' } }] }
  const health = { traceId: 'e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1', spanId: '0000000000000b02', name: 'health check' }
  const res = await call(`${m.url}/v2/otlp/v1/traces`, { key, body: jsonSpans([plain, health, bad, good], [{ key: 'revenium.organization.name', value: { stringValue: 'AcmeOrg' } }]) })
  t.equal(res.status, 200, res.text)
  t.match(res.body.partialSuccess, { rejectedSpans: 1, errorMessage: /^resourceSpans\[0\]\.scopeSpans\[0\]\.spans\[2\]: .*non-negative/ }, 'the rejected span is named by its path in the request, not its place in its route')

  const stored = await call(`${m.url}/profitstream/v2/api/sources/metrics/ai/completions`, { key })
  t.equal(stored.body.page.totalElements, 1, 'the good GenAI span became a usage record')
  t.equal(stored.body._embedded.aICompletionMetricResourceList[0].organizationName, 'AcmeOrg', "the other pipeline's change to the shared resource did not reach this span")

  const logged = m.logs.map((l) => JSON.parse(l)).filter((l) => l.msg === 'debug exporter').map((l) => l.item)
  t.same(logged.map((i) => i.span.name), ['GET /orders'], 'only the plain span reached the other pipeline; the health check was filtered out')
  t.same(logged[0].span.attributes, {}, 'its authorization header attribute was deleted')
  t.equal(logged[0].resource.attributes['deployment.region'], 'eu-west-1', 'a resource attribute was inserted')
  t.notOk('revenium.organization.name' in logged[0].resource.attributes, 'and one deleted')
  const metrics = (await call(`${m.url}/metrics`)).text
  t.match(metrics, /meterd_filter_dropped_items_total\{processor="filter\/health",pipeline="traces\/other"\} 1\b/)
})
