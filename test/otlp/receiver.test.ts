/**
 * The otlp receiver end to end: real OTel SDK exporters (gRPC, HTTP/protobuf, HTTP/JSON; traces
 * and logs) and the coding assistants' payloads against a running daemon, read back through the
 * read API; one admission for both transports; retries stored once; bad input answered 4xx.
 */
import { gzipSync } from 'node:zlib'
import { Metadata, status } from '@grpc/grpc-js'
import { SeverityNumber } from '@opentelemetry/api'
import { OTLPLogExporter as LogsGrpc } from '@opentelemetry/exporter-logs-otlp-grpc'
import { OTLPLogExporter as LogsJson } from '@opentelemetry/exporter-logs-otlp-http'
import { OTLPLogExporter as LogsProto } from '@opentelemetry/exporter-logs-otlp-proto'
import { OTLPTraceExporter as TracesGrpc } from '@opentelemetry/exporter-trace-otlp-grpc'
import { OTLPTraceExporter as TracesJson } from '@opentelemetry/exporter-trace-otlp-http'
import { OTLPTraceExporter as TracesProto } from '@opentelemetry/exporter-trace-otlp-proto'
import t from 'tap'
import type { OtlpReceiver } from '../../src/receivers/otlp/index.js'
import { BadRequest, ExportTraceServiceResponse, RetryInfo, RpcStatus } from '../../src/transport/otlp/proto.js'
import { call, startMeterd, type Meterd, type Teardown } from '../helpers/meterd.js'
import { encodeSpans, fixture, jsonSpans, protoOf, sdkLogs, sdkSpans } from '../helpers/otlp.js'
import { rawGrpcExport } from '../helpers/grpc.js'

const READ = '/profitstream/v2/api/sources/metrics'

async function startOtlp(t: Teardown, config: Record<string, unknown> = {}) {
  const m = await startMeterd(t, { config })
  const otlp = m.service.component<OtlpReceiver>('receiver', 'otlp')!
  return { m, grpc: otlp.ports.grpc!, http: `http://127.0.0.1:${otlp.ports.http}` }
}

/** The stored completion (or tool event) with this transactionId, as the read API shows it. */
async function readBack(m: Meterd, key: string, transactionId: string, kind: 'ai/completions' | 'tool/events' = 'ai/completions'): Promise<any[]> {
  const res = await call(`${m.url}${READ}/${kind}?transactionId=${encodeURIComponent(transactionId)}`, { key })
  return Object.values(res.body._embedded)[0] as any[]
}

const exported = (exporter: { export(items: any, cb: (r: { code: number; error?: Error }) => void): void }, items: unknown) =>
  new Promise<{ code: number; error?: Error }>((resolve) => exporter.export(items, resolve))

const chatSpans = (responseId: string, resource: Record<string, string> = {}) =>
  sdkSpans({ 'service.name': 'chatbot', 'revenium.organization.name': 'AcmeOrg', 'revenium.product.name': 'Gold', ...resource }, (tracer) => {
    const s = tracer.startSpan('chat gpt-4o', {
      attributes: {
        'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'openai', 'gen_ai.request.model': 'gpt-4o', 'gen_ai.response.id': responseId,
        'gen_ai.usage.input_tokens': 1000, 'gen_ai.usage.output_tokens': 200, 'gen_ai.agent.name': 'support-bot',
      },
    })
    s.end()
  })

t.test('the stock trace and logs exporters, over gRPC, HTTP/protobuf and HTTP/JSON, become priced usage records', async (t) => {
  const { m, grpc, http } = await startOtlp(t)
  const key = await m.key()
  const metadata = new Metadata()
  metadata.set('x-api-key', key)
  const traceExporters = [
    ['grpc', new TracesGrpc({ url: `http://127.0.0.1:${grpc}`, metadata })],
    ['http/protobuf', new TracesProto({ url: `${m.url}/v2/otlp/v1/traces`, headers: { 'x-api-key': key } })],
    ['http/json', new TracesJson({ url: `${http}/v1/traces`, headers: { authorization: `Bearer ${key}` } })],
  ] as const
  for (const [name, exporter] of traceExporters) {
    const spans = await chatSpans(`chatcmpl-${name}`)
    const result = await exported(exporter, spans)
    await exporter.shutdown()
    t.equal(result.code, 0, `${name}: exported (${result.error?.message ?? 'ok'})`)
    const [r] = await readBack(m, key, `chatcmpl-${name}`)
    t.match(r, {
      model: 'gpt-4o', provider: 'OpenAI', inputTokenCount: 1000, outputTokenCount: 200, agent: 'support-bot',
      organizationName: 'AcmeOrg', productName: 'Gold', attributed: true,
      cost: { source: 'pricebook', total: '0.0045' }, // 1000 × 2.50 + 200 × 10.00 per million
    }, `${name}: the record, attributed and priced`)
  }

  const logExporters = [
    ['grpc', new LogsGrpc({ url: `http://127.0.0.1:${grpc}`, metadata })],
    ['http/protobuf', new LogsProto({ url: `${m.url}/meter/v2/otlp/v1/logs`, headers: { 'x-api-key': key } })],
    ['http/json', new LogsJson({ url: `${m.url}/meter/v2/otlp/v1/logs`, headers: { 'x-api-key': key } })],
  ] as const
  for (const [name, exporter] of logExporters) {
    const records = await sdkLogs({ 'service.name': 'claude-code', 'organization.name': 'Acme Dev', 'product.name': 'Claude Code' }, 'com.anthropic.claude_code.events', (logger) => {
      logger.emit({
        body: 'claude_code.api_request', severityNumber: SeverityNumber.INFO,
        attributes: { 'event.name': 'api_request', model: 'claude-sonnet-4-5', input_tokens: 100, output_tokens: '50', cache_read_tokens: 0, cache_creation_tokens: 0, cost_usd: 0.00105, duration_ms: 900, request_id: `req-${name}` },
      })
    })
    const result = await exported(exporter, records)
    await exporter.shutdown()
    t.equal(result.code, 0, `${name} logs: exported (${result.error?.message ?? 'ok'})`)
    const [r] = await readBack(m, key, `req-${name}`)
    t.match(r, { model: 'claude-sonnet-4-5', provider: 'Anthropic', inputTokenCount: 100, outputTokenCount: 50, organizationName: 'Acme Dev', productName: 'Claude Code', clientCostUsd: 0.00105, cost: { source: 'pricebook', total: '0.00105' } }, `${name} logs: the record`)
  }
})

t.test('every coding-assistant payload of wire-contract §4 is stored as its golden record; the JSON answer is the vendor’s shape', async (t) => {
  const { m } = await startOtlp(t)
  const key = await m.key()
  for (const name of ['logs-claude-code-live', 'logs-claude-code-backfill', 'logs-gemini-cli', 'logs-codex', 'logs-cursor', 'logs-tool-call', 'traces-copilot']) {
    const signal = name.startsWith('traces') ? 'traces' : 'logs'
    const res = await call(`${m.url}/meter/v2/otlp/v1/${signal}`, { key, body: fixture(`${name}.json`) })
    t.equal(res.status, 200, `${name}: 200 ${res.text.slice(0, 200)}`)
    t.match(res.body, { id: /^[0-9A-Z]{26}$/, resourceType: signal, processedEvents: Number, created: /^\d{4}-/ }, `${name}: {id, resourceType, processedEvents, created}`)
    t.equal(res.body.partialSuccess, undefined)
    t.match(res.headers.get('x-ratelimit-bucket'), 'metering', 'rate-limit headers on OTLP answers')
    const expected = fixture(`expected/${name}.json`).records as { kind: string; body: Record<string, unknown> }[]
    for (const e of expected) {
      const [stored] = await readBack(m, key, e.body.transactionId as string, e.kind === 'tool' ? 'tool/events' : 'ai/completions')
      t.match(stored, e.body, `${name}: ${e.body.transactionId} stored as mapped`)
      t.notOk(JSON.stringify(stored).includes('hak_acme'), `${name}: no API key stored`)
    }
  }
  // Values as strings and as numbers: the same record (Claude Code live sends both).
  const healthCheck = fixture('logs-health-check.json')
  const health = await call(`${m.url}/meter/v2/otlp`, { key, body: healthCheck })
  const sent = healthCheck.resourceLogs.flatMap((r: any) => r.scopeLogs).reduce((n: number, s: any) => n + s.logRecords.length, 0)
  t.match(health.body, { resourceType: 'logs', processedEvents: sent }, 'the unified endpoint finds the signal in the body')
  const metrics = await call(`${m.url}/v2/otlp/v1/metrics`, { key, body: { resourceMetrics: [{ scopeMetrics: [{ metrics: [{ name: 'x', sum: { dataPoints: [{ asInt: '3' }] } }] }] }] } })
  t.match(metrics.body, { resourceType: 'metrics', processedEvents: 0 }, 'metrics are accepted and counted')
  const legacy = await call(`${m.url}/meter/v2/otel/v1/metrics`, { key, body: { resourceMetrics: [] } })
  t.match(legacy.body, { resourceType: 'metrics', processedMetrics: 0 }, 'the old metrics sender reads processedMetrics')
})

t.test('a retried export, over HTTP and then gRPC, is stored once', async (t) => {
  const { m, grpc } = await startOtlp(t)
  const key = await m.key()
  const spans = await chatSpans('chatcmpl-retried')
  const { proto } = encodeSpans(spans)
  const first = await call(`${m.url}/v2/otlp/v1/traces`, { key, raw: Buffer.from(proto), headers: { 'content-type': 'application/x-protobuf' } })
  t.equal(first.status, 200)
  t.equal(first.headers.get('content-type'), 'application/x-protobuf')
  t.equal((await call(`${m.url}/v2/otlp/v1/traces`, { key, raw: Buffer.from(proto), headers: { 'content-type': 'application/x-protobuf' } })).status, 200)
  const md = new Metadata()
  md.set('authorization', `Bearer ${key}`)
  const again = await rawGrpcExport(grpc, 'traces', proto, { metadata: md })
  t.equal(again.err, undefined, 'OK over gRPC')
  // Without a response id, the record's transactionId is a hash of trace id and span id: the same on every transport.
  const anon = await sdkSpans({ 'service.name': 'x' }, (tracer) => tracer.startSpan('chat', { attributes: { 'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'openai', 'gen_ai.request.model': 'gpt-4o-mini', 'gen_ai.usage.input_tokens': 1, 'gen_ai.usage.output_tokens': 1 } }).end())
  const anonProto = encodeSpans(anon).proto
  t.equal((await call(`${m.url}/v2/otlp/v1/traces`, { key, body: encodeSpans(anon).json })).status, 200)
  t.equal((await rawGrpcExport(grpc, 'traces', anonProto, { metadata: md })).err, undefined)
  const all = await call(`${m.url}${READ}/ai/completions?size=100`, { key })
  t.equal(all.body.page.totalElements, 2, 'two records in all')
  t.equal((await readBack(m, key, 'chatcmpl-retried')).length, 1)
})

t.test('one admission: key in a header, in metadata or in a resource attribute; wrong keys and rate limits on both transports', async (t) => {
  const { m, grpc } = await startOtlp(t, { extensions: { ratelimit: { limits: { metering: 3 } } } })
  const key = await m.key({ team: 'otlp-team', account: 'otlp-acct' })
  // A key in the resource attribute authenticates and is stored nowhere.
  const withKey = jsonSpans(
    [{ traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331', name: 'chat', startTimeUnixNano: '1795305494866000000', endTimeUnixNano: '1795305495866000000', attributes: [
      { key: 'gen_ai.operation.name', value: { stringValue: 'chat' } }, { key: 'gen_ai.provider.name', value: { stringValue: 'openai' } },
      { key: 'gen_ai.request.model', value: { stringValue: 'gpt-4o' } }, { key: 'gen_ai.response.id', value: { stringValue: 'chatcmpl-bodykey' } },
      { key: 'gen_ai.usage.input_tokens', value: { intValue: '10' } }, { key: 'gen_ai.usage.output_tokens', value: { intValue: 2 } }] }],
    [{ key: 'revenium.api_key', value: { stringValue: key } }, { key: 'service.name', value: { stringValue: 'gemini-cli' } }],
  )
  const viaBody = await call(`${m.url}/meter/v2/otlp/v1/traces`, { body: withKey })
  t.equal(viaBody.status, 200, `a key in the resource attribute authenticates (${viaBody.text})`)
  const [r] = await readBack(m, key, 'chatcmpl-bodykey')
  t.equal(r.team.id, 'otlp-team', 'as the key’s team')
  t.notOk(JSON.stringify(r).includes(key), 'the key is stored nowhere')
  const viaGrpc = await rawGrpcExport(grpc, 'traces', protoOf('traces', withKey))
  t.equal(viaGrpc.err, undefined, 'and over gRPC')

  const wrong = await call(`${m.url}/meter/v2/otlp/v1/traces`, { key: 'hak_wrong_wrongwrongwrongwrong', body: withKey })
  t.equal(wrong.status, 401)
  t.equal(wrong.body.error.type, 'authentication_error')
  const md = new Metadata()
  md.set('x-api-key', 'hak_wrong_wrongwrongwrongwrong')
  const wrongGrpc = await rawGrpcExport(grpc, 'traces', protoOf('traces', withKey), { metadata: md })
  t.equal(wrongGrpc.err?.code, status.UNAUTHENTICATED)
  const none = await rawGrpcExport(grpc, 'traces', protoOf('traces', jsonSpans([])))
  t.equal(none.err?.code, status.UNAUTHENTICATED, 'no key anywhere')

  // Two calls spent the 3-per-second bucket of this account above; the window may have turned since, so spend it.
  let limited: Awaited<ReturnType<typeof call>> | undefined
  for (let i = 0; i < 5 && !limited; i++) {
    const res = await call(`${m.url}/meter/v2/otlp/v1/traces`, { key, body: jsonSpans([]) })
    if (res.status === 429) limited = res
  }
  t.ok(limited, 'over the limit: 429')
  t.equal(limited!.headers.get('x-ratelimit-limited-reason'), 'bucket-rate')
  t.ok(Number(limited!.headers.get('retry-after')) >= 1)
  t.equal(limited!.headers.get('x-ratelimit-remaining'), '0')
  const good = new Metadata()
  good.set('x-api-key', key)
  let exhausted: Awaited<ReturnType<typeof rawGrpcExport>> | undefined
  for (let i = 0; i < 5 && !exhausted; i++) {
    const res = await rawGrpcExport(grpc, 'traces', protoOf('traces', jsonSpans([])), { metadata: good })
    if (res.err?.code === status.RESOURCE_EXHAUSTED) exhausted = res
  }
  t.ok(exhausted, 'over the limit on gRPC: RESOURCE_EXHAUSTED')
  const details = exhausted!.err!.metadata.get('grpc-status-details-bin')[0] as Buffer
  const st = RpcStatus.decode(details) as any
  t.equal(st.details[0].type_url, 'type.googleapis.com/google.rpc.RetryInfo')
  t.ok(Number((RetryInfo.decode(st.details[0].value) as any).retryDelay.seconds) >= 1, 'with RetryInfo')
})

t.test('a span the connector refuses is named by its path in the request, as the decoder names the spans it refuses', async (t) => {
  const { m } = await startOtlp(t)
  const key = await m.key()
  const good = fixture('traces-genai-openai.json').resourceSpans[0].scopeSpans[0].spans[0]
  const negative = { traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203332', name: 'chat', attributes: [
    { key: 'gen_ai.operation.name', value: { stringValue: 'chat' } }, { key: 'gen_ai.provider.name', value: { stringValue: 'openai' } },
    { key: 'gen_ai.request.model', value: { stringValue: 'gpt-4o' } }, { key: 'gen_ai.usage.input_tokens', value: { intValue: '-3' } }] }
  const badId = { traceId: 'nothex', spanId: '01', name: 'chat' }
  // The connector said `span 1:` and `item 0:`: a place among the accepted spans, which no client can find.
  const twoScopes = (second: unknown[]) => ({ resourceSpans: [{ scopeSpans: [{ spans: [good] }, { spans: second }] }] })
  // The partial success's errorMessage, over HTTP/JSON or HTTP/protobuf.
  const post = async (body: unknown, proto: boolean): Promise<{ status: number; message: string }> => {
    if (!proto) {
      const res = await call(`${m.url}/v2/otlp/v1/traces`, { key, body })
      return { status: res.status, message: res.body?.partialSuccess?.errorMessage }
    }
    const res = await fetch(`${m.url}/v2/otlp/v1/traces`, { method: 'POST', body: Buffer.from(protoOf('traces', body)), headers: { 'x-api-key': key, 'content-type': 'application/x-protobuf' } })
    const decoded = ExportTraceServiceResponse.decode(new Uint8Array(await res.arrayBuffer())) as any
    return { status: res.status, message: decoded.partialSuccess?.errorMessage }
  }
  for (const proto of [false, true]) {
    const how = proto ? 'protobuf' : 'JSON'
    const { status: partialStatus, message } = await post(twoScopes([badId, negative]), proto)
    t.equal(partialStatus, 200, `${how}: the good span stands`)
    t.match(message, /resourceSpans\[0\]\.scopeSpans\[1\]\.spans\[0\]: traceId/, `${how}: the decoder's refusal`)
    t.match(message, /resourceSpans\[0\]\.scopeSpans\[1\]\.spans\[1\]: gen_ai\.usage\.input_tokens must be a non-negative integer/, `${how}: the connector's refusal, by the same kind of path`)
  }
  const only = await call(`${m.url}/v2/otlp/v1/traces`, { key, body: { resourceSpans: [{ scopeSpans: [{ spans: [] }, { spans: [badId, negative] }] }] } })
  t.equal(only.status, 400)
  t.match(only.body.error, { code: 'invalid_otlp_items', message: /^resourceSpans\[0\]\.scopeSpans\[1\]\.spans\[1\]: gen_ai\.usage\.input_tokens.*; resourceSpans\[0\]\.scopeSpans\[1\]\.spans\[0\]: traceId/ }, 'every span refused: both named by path')
})

t.test('bad input: a 4xx or INVALID_ARGUMENT each, never a crash', async (t) => {
  const { m, grpc } = await startOtlp(t)
  const key = await m.key()
  const md = new Metadata()
  md.set('x-api-key', key)
  const good = protoOf('traces', fixture('traces-genai-openai.json'))
  const negativeOnly = jsonSpans([{ traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331', name: 'chat', attributes: [
    { key: 'gen_ai.operation.name', value: { stringValue: 'chat' } }, { key: 'gen_ai.provider.name', value: { stringValue: 'openai' } },
    { key: 'gen_ai.request.model', value: { stringValue: 'gpt-4o' } }, { key: 'gen_ai.usage.input_tokens', value: { intValue: '-3' } }] }])
  // The error's code: from the JSON error shape, or from a protobuf request's google.rpc.Status (`code: message`).
  const post = async (raw: Buffer, headers: Record<string, string> = { 'content-type': 'application/x-protobuf' }, path = '/v2/otlp/v1/traces') => {
    const res = await fetch(`${m.url}${path}`, { method: 'POST', body: raw, headers: { 'x-api-key': key, ...headers } })
    const bytes = Buffer.from(await res.arrayBuffer())
    if (res.headers.get('content-type') !== 'application/x-protobuf') return { status: res.status, body: JSON.parse(bytes.toString('utf8')) }
    const message = (RpcStatus.decode(bytes) as any).message as string
    return { status: res.status, body: { error: { code: message.slice(0, message.indexOf(':')) } } }
  }
  const cases: [string, () => Promise<{ status: number; body: any }>, number, string][] = [
    ['truncated protobuf', () => post(Buffer.from(good).subarray(0, good.length - 7)), 400, 'malformed_protobuf'],
    ['wrong content type', () => post(Buffer.from('x'), { 'content-type': 'text/plain' }), 415, 'unsupported_media_type'],
    ['protobuf on the unified endpoint', () => post(Buffer.from(good), { 'content-type': 'application/x-protobuf' }, '/v2/otlp'), 415, 'unsupported_media_type'],
    ['gzip bomb', () => post(gzipSync(Buffer.alloc(64 * 1024 * 1024)), { 'content-type': 'application/x-protobuf', 'content-encoding': 'gzip' }), 413, 'body_too_large'],
    ['10 MiB batch', () => post(Buffer.alloc(10 * 1024 * 1024, 1)), 413, 'body_too_large'],
    ['not JSON', () => post(Buffer.from('{"resourceSpans": ['), { 'content-type': 'application/json' }), 400, 'malformed_json'],
    ['JSON that is no export', () => post(Buffer.from('{"resourceSpans": 3}'), { 'content-type': 'application/json' }), 400, 'invalid_otlp'],
    ['invalid ids only', () => post(Buffer.from(JSON.stringify(jsonSpans([{ traceId: 'xyz', spanId: '12', name: 'chat' }]))), { 'content-type': 'application/json' }), 400, 'invalid_otlp_items'],
    ['a span with negative tokens only', () => post(Buffer.from(JSON.stringify(negativeOnly)), { 'content-type': 'application/json' }), 400, 'invalid_otlp_items'],
  ]
  for (const [name, run, wantStatus, code] of cases) {
    const res = await run()
    t.equal(res.status, wantStatus, `${name} → ${wantStatus}`)
    t.equal(res.body?.error?.code, code, `${name}: ${code}`)
  }
  const truncated = await rawGrpcExport(grpc, 'traces', Buffer.from(good).subarray(0, good.length - 7), { metadata: md })
  t.equal(truncated.err?.code, status.INVALID_ARGUMENT, 'truncated protobuf over gRPC')
  const negative = await rawGrpcExport(grpc, 'traces', protoOf('traces', negativeOnly), { metadata: md })
  t.equal(negative.err?.code, status.INVALID_ARGUMENT, 'negative tokens only over gRPC')
  const big = await rawGrpcExport(grpc, 'traces', Buffer.alloc(10 * 1024 * 1024, 1), { metadata: md })
  t.equal(big.err?.code, status.RESOURCE_EXHAUSTED, 'a 10 MiB message over gRPC (refused by grpc-js before decoding)')
  t.equal((await call(`${m.url}/healthz`)).status, 200, 'still up')

  // A batch with some unusable items stores the good ones and reports the rest.
  const bad = await call(`${m.url}/v2/otlp/v1/traces`, { key, body: fixture('traces-bad.json') })
  t.equal(bad.status, 200, 'a negative token count among good spans: the good ones are stored')
  t.match(bad.body.partialSuccess, { rejectedSpans: Number, errorMessage: /non-negative/ })
  const mixed = jsonSpans([
    ...fixture('traces-genai-openai.json').resourceSpans[0].scopeSpans[0].spans,
    { traceId: 'nothex', spanId: '01', name: 'chat' },
  ])
  const partial = await call(`${m.url}/v2/otlp/v1/traces`, { key, body: mixed })
  t.equal(partial.status, 200)
  t.match(partial.body.partialSuccess, { rejectedSpans: 1, errorMessage: /traceId/ })
  const body = protoOf('traces', { resourceSpans: [{ scopeSpans: [{ spans: [...fixture('traces-genai-openai.json').resourceSpans[0].scopeSpans[0].spans, { traceId: Buffer.alloc(3).toString('hex'), spanId: '0102030405060708', name: 'x' }] }] }] })
  const asProto = await fetch(`${m.url}/v2/otlp/v1/traces`, { method: 'POST', body: Buffer.from(body), headers: { 'x-api-key': key, 'content-type': 'application/x-protobuf' } })
  t.equal(asProto.status, 200)
  const decoded = ExportTraceServiceResponse.decode(new Uint8Array(await asProto.arrayBuffer())) as any
  t.equal(Number(decoded.partialSuccess.rejectedSpans), 1, 'protobuf: partial_success in the Export response')
})

t.test('OTLP/HTTP failures: a protobuf request gets a protobuf google.rpc.Status (the specification’s body), a JSON request the JSON error shape', async (t) => {
  const { m, http } = await startOtlp(t, { extensions: { ratelimit: { limits: { metering: 2 } } } })
  // An account each, so that only the rate-limit case meets the 2-per-second bucket.
  let accounts = 0
  const fresh = () => m.key({ account: `acct-${++accounts}` })
  const key = await fresh()
  const good = Buffer.from(protoOf('traces', fixture('traces-genai-openai.json')))
  const PROTO = { 'content-type': 'application/x-protobuf' }
  // What the Collector's otlphttp exporter does with any 4xx/5xx: decode the body as a google.rpc.Status.
  const failed = async (url: string, body: Buffer, headers: Record<string, string>) => {
    const res = await fetch(url, { method: 'POST', body, headers })
    const bytes = new Uint8Array(await res.arrayBuffer())
    let st: any
    try {
      st = RpcStatus.toObject(RpcStatus.decode(bytes), { defaults: true })
    } catch {
      st = undefined
    }
    return { res, st }
  }
  const cases: [string, string, Buffer, Record<string, string>, number, number, RegExp][] = [
    ['wrong key', `${m.url}/v2/otlp/v1/traces`, good, { ...PROTO, 'x-api-key': 'hak_wrong_wrongwrongwrongwrong' }, 401, status.UNAUTHENTICATED, /^invalid_api_key: /],
    ['no key', `${http}/v1/traces`, good, PROTO, 401, status.UNAUTHENTICATED, /^missing_api_key: /],
    ['truncated protobuf', `${http}/v1/logs`, good.subarray(0, 9), { ...PROTO, 'x-api-key': await fresh() }, 400, status.INVALID_ARGUMENT, /^malformed_protobuf: /],
    ['gzip bomb', `${m.url}/meter/v2/otlp/v1/traces`, gzipSync(Buffer.alloc(64 * 1024 * 1024)), { ...PROTO, 'content-encoding': 'gzip', 'x-api-key': await fresh() }, 413, status.INVALID_ARGUMENT, /^body_too_large: /],
    ['protobuf on the unified endpoint', `${m.url}/v2/otlp`, good, { ...PROTO, 'x-api-key': await fresh() }, 415, status.INVALID_ARGUMENT, /^unsupported_media_type: /],
  ]
  for (const [name, url, body, headers, want, code, message] of cases) {
    const { res, st } = await failed(url, body, headers)
    t.equal(res.status, want, `${name}: ${want}`)
    t.equal(res.headers.get('content-type'), 'application/x-protobuf', `${name}: the request's content type`)
    t.ok(st, `${name}: the body is a google.rpc.Status`)
    t.equal(st?.code, code, `${name}: the gRPC code of the same failure`)
    t.match(st?.message, message, `${name}: the error code and message`)
  }
  const malformed = await failed(`${http}/v1/logs`, good.subarray(0, 9), { ...PROTO, 'x-api-key': await fresh() })
  t.equal(malformed.st.details[0].type_url, 'type.googleapis.com/google.rpc.BadRequest', '400: a BadRequest in the details, as the specification asks')
  t.match((BadRequest.decode(malformed.st.details[0].value) as any).fieldViolations[0].description, /not a valid ExportLogsServiceRequest/)

  // Over the 2-per-second bucket: 429 with Retry-After, and a RetryInfo saying the same.
  let limited: Awaited<ReturnType<typeof failed>> | undefined
  for (let i = 0; i < 6 && !limited; i++) {
    const r = await failed(`${m.url}/v2/otlp/v1/traces`, good, { ...PROTO, 'x-api-key': key })
    if (r.res.status === 429) limited = r
  }
  t.ok(limited, 'over the limit: 429')
  t.equal(limited!.res.headers.get('content-type'), 'application/x-protobuf')
  t.ok(Number(limited!.res.headers.get('retry-after')) >= 1, 'Retry-After, which exporters honour')
  t.equal(limited!.st.code, status.RESOURCE_EXHAUSTED)
  t.equal(limited!.st.details[0].type_url, 'type.googleapis.com/google.rpc.RetryInfo')
  t.equal(Number((RetryInfo.decode(limited!.st.details[0].value) as any).retryDelay.seconds), Number(limited!.res.headers.get('retry-after')))
  t.equal(limited!.res.headers.get('x-ratelimit-bucket'), 'metering', 'the rate-limit headers as on every answer')

  // A JSON request keeps DESIGN's shape; a request of neither type too.
  const json = await call(`${m.url}/v2/otlp/v1/traces`, { key: 'hak_wrong_wrongwrongwrongwrong', body: fixture('traces-genai-openai.json') })
  t.equal(json.status, 401)
  t.equal(json.headers.get('content-type'), 'application/json')
  t.match(json.body.error, { type: 'authentication_error', code: 'invalid_api_key' })
  const text = await call(`${m.url}/v2/otlp/v1/traces`, { key: await fresh(), raw: 'x', headers: { 'content-type': 'text/plain' } })
  t.equal(text.status, 415)
  t.equal(text.body.error.code, 'unsupported_media_type')
})

t.test('a log record whose attribute nests maps 8 deep is taken from the OTLP/JSON exporter as from the protobuf one', async (t) => {
  const { m } = await startOtlp(t)
  const key = await m.key()
  // GenAI events and tool parameters nest maps and arrays; protobuf decodes them ~30 deep.
  let nested: Record<string, unknown> = { leaf: 'v' }
  for (let i = 0; i < 8; i++) nested = { [`level${i}`]: nested }
  for (const [name, Exporter] of [['http/protobuf', LogsProto], ['http/json', LogsJson]] as const) {
    const records = await sdkLogs({ 'service.name': 'claude-code', 'organization.name': 'Acme Dev' }, 'com.anthropic.claude_code.events', (logger) => {
      logger.emit({
        body: 'claude_code.api_request', severityNumber: SeverityNumber.INFO,
        attributes: { 'event.name': 'api_request', model: 'claude-sonnet-4-5', input_tokens: 10, output_tokens: 5, request_id: `req-nested-${name}`, tool_parameters: nested as any },
      })
    })
    const exporter = new Exporter({ url: `${m.url}/meter/v2/otlp/v1/logs`, headers: { 'x-api-key': key } })
    const result = await exported(exporter, records)
    await exporter.shutdown()
    t.equal(result.code, 0, `${name}: exported (${result.error?.message ?? 'ok'})`)
    const [r] = await readBack(m, key, `req-nested-${name}`)
    t.match(r, { model: 'claude-sonnet-4-5', inputTokenCount: 10, outputTokenCount: 5 }, `${name}: the record stored`)
  }
  // Nesting stays bounded: far deeper than protobuf decodes is refused before parsing.
  let deep: unknown = { stringValue: 'x' }
  for (let i = 0; i < 60; i++) deep = { kvlistValue: { values: [{ key: 'k', value: deep }] } }
  const res = await call(`${m.url}/meter/v2/otlp/v1/logs`, { key, body: { resourceLogs: [{ scopeLogs: [{ logRecords: [{ body: deep }] }] }] } })
  t.equal(res.status, 400)
  t.equal(res.body.error.code, 'nesting_too_deep')
})
