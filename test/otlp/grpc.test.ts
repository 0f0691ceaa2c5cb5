import { Metadata, status } from '@grpc/grpc-js'
import { connect } from 'node:http2'
import { SeverityNumber } from '@opentelemetry/api'
import { OTLPLogExporter } from '@opentelemetry/exporter-logs-otlp-grpc'
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-grpc'
import { CompressionAlgorithm } from '@opentelemetry/otlp-exporter-base'
import type { ReadableLogRecord } from '@opentelemetry/sdk-logs'
import type { ReadableSpan } from '@opentelemetry/sdk-trace'
import t, { type Test } from 'tap'
import { ApiError, PermanentError, RetryableError } from '../../src/core/errors.js'
import { OtlpGrpcServer, type CallInfo, type ExportResult } from '../../src/transport/grpc/server.js'
import type { DecodedRequest, OtlpSignal } from '../../src/transport/otlp/batch.js'
import { decodeLogsProto, decodeTracesProto } from '../../src/transport/otlp/decode-proto.js'
import { ExportLogsServiceResponse, ExportTraceServiceResponse, RetryInfo, RpcStatus, SERVICES } from '../../src/transport/otlp/proto.js'
import { encodeLogs, encodeSpans, jsonSpans, protoOf, sdkLogs, sdkSpans } from '../helpers/otlp.js'
import { rawGrpcExport } from '../helpers/grpc.js'
import { bodyBudget } from '../../src/transport/http/body.js'
import { gzipSync } from 'node:zlib'

interface Seen {
  signal: OtlpSignal
  request: DecodedRequest
  call: CallInfo
}

/** A server on a free port whose handler records each call and answers what the test says. */
async function startServer(t: Test, answer: (seen: Seen) => Promise<ExportResult | void> = async () => {}) {
  const seen: Seen[] = []
  const statuses: [OtlpSignal, status][] = []
  const server = new OtlpGrpcServer({
    endpoint: '127.0.0.1:0',
    decode: { apiKeyAttributes: ['service.api_key', 'revenium.api_key'] },
    handler: (signal, request, call) => {
      const s = { signal, request, call }
      seen.push(s)
      return answer(s)
    },
    onStatus: (signal, code) => void statuses.push([signal, code]),
  })
  const port = await server.start()
  t.teardown(() => server.shutdown(1000))
  return { port, seen, statuses, url: `http://127.0.0.1:${port}` }
}

function exportSpans(exporter: OTLPTraceExporter, spans: ReadableSpan[]): Promise<{ code: number; error?: any }> {
  return new Promise((resolve) => exporter.export(spans, resolve))
}

function exportLogs(exporter: OTLPLogExporter, records: ReadableLogRecord[]): Promise<{ code: number; error?: any }> {
  return new Promise((resolve) => exporter.export(records, resolve))
}

const genAiSpans = () =>
  sdkSpans({ 'service.name': 'chatbot', 'revenium.api_key': 'hak_in_resource_0001', 'revenium.organization.name': 'AcmeOrg' }, (tracer) => {
    for (let i = 0; i < 3; i++) {
      const s = tracer.startSpan('chat gpt-4o', {
        attributes: { 'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'openai', 'gen_ai.request.model': 'gpt-4o', 'gen_ai.usage.input_tokens': 12 + i, 'gen_ai.usage.output_tokens': 5 },
      })
      s.end()
    }
  })

t.test('the real OTLP/gRPC trace exporter reaches the handler with the decoded spans and its metadata', async (t) => {
  const srv = await startServer(t)
  const spans = await genAiSpans()
  const expected = decodeTracesProto(encodeSpans(spans).proto, { apiKeyAttributes: ['revenium.api_key'] })
  for (const compression of [CompressionAlgorithm.NONE, CompressionAlgorithm.GZIP]) {
    const metadata = new Metadata()
    metadata.set('x-api-key', 'hak_header_key_0001')
    const exporter = new OTLPTraceExporter({ url: srv.url, metadata, compression })
    const result = await exportSpans(exporter, spans)
    await exporter.shutdown()
    t.equal(result.code, 0, `${compression}: the export succeeds`)
    const call = srv.seen.at(-1)!
    t.equal(call.signal, 'traces')
    t.equal(call.call.metadata['x-api-key'], 'hak_header_key_0001', `${compression}: the key header reaches the handler`)
    t.match(call.call.metadata['user-agent'], /OTel-OTLP-Exporter-JavaScript/)
    t.same(call.request, expected, `${compression}: the spans are decoded as the SDK recorded them`)
    t.same(call.request.apiKeys, ['hak_in_resource_0001'], 'the resource key is handed over')
    if (call.request.signal === 'traces') {
      t.equal(call.request.items.length, 3)
      t.notOk('revenium.api_key' in call.request.items[0].resource.attributes, 'and taken off the items')
      t.equal(call.request.items[2].span.attributes['gen_ai.usage.input_tokens'], 14)
    }
  }
  t.same(srv.statuses, [['traces', status.OK], ['traces', status.OK]])
})

t.test('the real OTLP/gRPC logs exporter reaches the handler, with Authorization: Bearer', async (t) => {
  const srv = await startServer(t)
  const records = await sdkLogs({ 'service.name': 'claude-code' }, 'com.anthropic.claude_code.events', (logger) => {
    logger.emit({ body: 'claude_code.api_request', severityNumber: SeverityNumber.INFO, attributes: { 'event.name': 'api_request', model: 'claude-sonnet-4-5', input_tokens: '120', output_tokens: '30' } })
  })
  const metadata = new Metadata()
  metadata.set('authorization', 'Bearer rev_mk_bearer_0001')
  const exporter = new OTLPLogExporter({ url: srv.url, metadata, compression: CompressionAlgorithm.GZIP })
  const result = await exportLogs(exporter, records)
  await exporter.shutdown()
  t.equal(result.code, 0)
  const call = srv.seen[0]
  t.equal(call.signal, 'logs')
  t.equal(call.call.metadata.authorization, 'Bearer rev_mk_bearer_0001')
  t.same(call.request, decodeLogsProto(encodeLogs(records).proto))
  t.equal(call.request.signal === 'logs' && call.request.items[0].log.attributes.input_tokens, '120')
})

t.test('metrics are accepted and counted', async (t) => {
  const srv = await startServer(t)
  const body = protoOf('metrics', { resourceMetrics: [{ scopeMetrics: [{ metrics: [{ name: 'tokens', sum: { dataPoints: [{}, {}] } }] }] }] })
  const res = await rawGrpcExport(srv.port, 'metrics', body)
  t.notOk(res.err)
  t.equal(res.response!.length, 0, 'full success is the empty response')
  t.equal(srv.seen[0].request.signal, 'metrics')
  t.equal(srv.seen[0].request.signal === 'metrics' && srv.seen[0].request.dataPoints, 2)
})

t.test('items refused by the decoder and by the handler come back as partial_success', async (t) => {
  const srv = await startServer(t, async () => ({ rejected: 1, errorMessage: 'item 0: gen_ai.usage.input_tokens must be a non-negative integer, got -3' }))
  const good = { traceId: 'ab'.repeat(16), spanId: 'cd'.repeat(8), startTimeUnixNano: '1795305494866000000' }
  const body = protoOf('traces', jsonSpans([good, { ...good, spanId: 'cdcd' }, { ...good, spanId: 'ef'.repeat(8) }]))
  const res = await rawGrpcExport(srv.port, 'traces', body)
  t.notOk(res.err, 'the export is answered OK')
  const response = ExportTraceServiceResponse.decode(res.response!) as any
  t.equal(Number(response.partialSuccess.rejectedSpans), 2, 'one refused by the decoder, one by the handler')
  t.equal(
    response.partialSuccess.errorMessage,
    'resourceSpans[0].scopeSpans[0].spans[1]: spanId must be 8 bytes, got 2; item 0: gen_ai.usage.input_tokens must be a non-negative integer, got -3',
  )
  t.equal(srv.seen[0].request.signal === 'traces' && srv.seen[0].request.items.length, 2, 'the handler got the good spans')

  // Logs use their own response message.
  const logs = protoOf('logs', { resourceLogs: [{ scopeLogs: [{ logRecords: [{ body: { stringValue: 'x' } }] }] }] })
  const r2 = await rawGrpcExport(srv.port, 'logs', logs)
  const lr = ExportLogsServiceResponse.decode(r2.response!) as any
  t.equal(Number(lr.partialSuccess.rejectedLogRecords), 1)
})

t.test('errors map to the statuses the Collector answers, RetryInfo where a retry helps', async (t) => {
  const cases: { name: string; error: unknown; code: status; retrySeconds?: number; trailers?: Record<string, string> }[] = [
    { name: 'bad key', error: new ApiError(401, 'authentication_error', 'invalid_api_key', 'the API key is not valid'), code: status.UNAUTHENTICATED },
    { name: 'missing scope', error: new ApiError(403, 'permission_error', 'insufficient_scope', 'the key lacks metering:write'), code: status.PERMISSION_DENIED },
    { name: 'bad data', error: new PermanentError('model is required', 'missing_field', 'model'), code: status.INVALID_ARGUMENT },
    {
      name: 'over the limit',
      error: new ApiError(429, 'rate_limit_error', 'rate_limit_exceeded', 'too many requests', { headers: { 'retry-after': '3', 'x-ratelimit-bucket': 'metering', 'x-ratelimit-remaining': '0' } }),
      code: status.RESOURCE_EXHAUSTED,
      retrySeconds: 3,
      trailers: { 'retry-after': '3', 'x-ratelimit-bucket': 'metering', 'x-ratelimit-remaining': '0' },
    },
    { name: 'downstream failure', error: new RetryableError('lmdb commit failed'), code: status.UNAVAILABLE, retrySeconds: 1 },
    { name: 'a bug', error: new TypeError('x is undefined'), code: status.UNAVAILABLE, retrySeconds: 1 },
  ]
  let current: unknown
  const srv = await startServer(t, async () => {
    throw current
  })
  const spans = await genAiSpans()
  const body = encodeSpans(spans).proto
  for (const c of cases) {
    current = c.error
    const res = await rawGrpcExport(srv.port, 'traces', body)
    t.equal(res.err?.code, c.code, `${c.name}: status ${status[c.code]}`)
    const details = res.err!.metadata.get('grpc-status-details-bin')
    if (c.retrySeconds === undefined) {
      t.same(details, [], `${c.name}: no RetryInfo (not to be retried as is)`)
    } else {
      const st = RpcStatus.decode(details[0] as Buffer) as any
      t.equal(st.code, c.code, `${c.name}: google.rpc.Status carries the code`)
      t.equal(st.details[0].type_url, 'type.googleapis.com/google.rpc.RetryInfo')
      const retry = RetryInfo.decode(st.details[0].value) as any
      t.equal(Number(retry.retryDelay.seconds), c.retrySeconds, `${c.name}: RetryInfo says when`)
    }
    for (const [k, v] of Object.entries(c.trailers ?? {})) t.same(res.err!.metadata.get(k), [v], `${c.name}: ${k} trailer`)
  }

  // The real exporter sees the same status (it reports the failure, it is not left hanging).
  current = cases[0].error
  const exporter = new OTLPTraceExporter({ url: srv.url })
  const result = await exportSpans(exporter, spans)
  await exporter.shutdown()
  t.equal(result.code, 1, 'the exporter reports a failure')
  t.equal(result.error?.code, status.UNAUTHENTICATED)
})

t.test('bad input is INVALID_ARGUMENT or RESOURCE_EXHAUSTED, never a crash, and the server keeps serving', async (t) => {
  const srv = await startServer(t)
  const valid = protoOf('traces', jsonSpans([{ traceId: 'ab'.repeat(16), spanId: 'cd'.repeat(8), name: 'a span with a name', startTimeUnixNano: '1' }]))

  const truncated = await rawGrpcExport(srv.port, 'traces', valid.subarray(0, valid.length - 5))
  t.equal(truncated.err?.code, status.INVALID_ARGUMENT, 'truncated protobuf')
  t.match(truncated.err?.details, /malformed_protobuf/)

  const garbage = await rawGrpcExport(srv.port, 'logs', Buffer.from('this is not protobuf'))
  t.equal(garbage.err?.code, status.INVALID_ARGUMENT, 'not protobuf at all')

  // A gzip bomb: 11 MiB of zeros in about 11 KiB; grpc-js stops inflating at the 10 MiB limit.
  const bomb = await rawGrpcExport(srv.port, 'traces', Buffer.alloc(11 * 1024 * 1024), { gzip: true })
  t.equal(bomb.err?.code, status.RESOURCE_EXHAUSTED, 'a gzip bomb stops at the message limit')
  t.same(bomb.err?.metadata.get('grpc-status-details-bin'), [], 'without RetryInfo: exporters do not retry it')

  const big = await rawGrpcExport(srv.port, 'traces', Buffer.alloc(10 * 1024 * 1024 + 1))
  t.equal(big.err?.code, status.RESOURCE_EXHAUSTED, 'over 10 MiB uncompressed')

  // Just under the limit: a valid 10 MiB batch is decoded whole.
  const attribute = { key: 'payload', value: { stringValue: 'x'.repeat(1024 * 1024) } }
  const spans = Array.from({ length: 9 }, (_, i) => ({ traceId: 'ab'.repeat(16), spanId: (i + 1).toString(16).padStart(16, '0'), startTimeUnixNano: '1', attributes: [attribute] }))
  const nine = protoOf('traces', jsonSpans(spans))
  t.ok(nine.length > 9 * 1024 * 1024 && nine.length < 10 * 1024 * 1024, 'a batch of almost 10 MiB')
  const ok = await rawGrpcExport(srv.port, 'traces', nine, { gzip: true })
  t.notOk(ok.err, 'is accepted')
  t.equal(srv.seen.at(-1)!.request.signal === 'traces' && (srv.seen.at(-1)!.request as any).items.length, 9)

  t.equal(srv.seen.length, 1, 'the handler saw only the valid requests')
  t.same(
    srv.statuses.map(([, code]) => code),
    [status.INVALID_ARGUMENT, status.INVALID_ARGUMENT, status.OK],
    'onStatus saw the decoding failures too (grpc-js refuses oversize messages before any handler)',
  )

  const after = await rawGrpcExport(srv.port, 'traces', valid)
  t.notOk(after.err, 'the server still answers')
})

t.test('a call whose message never finishes arriving is cut with its connection; exporters ride over the reconnects', async (t) => {
  const server = new OtlpGrpcServer({ endpoint: '127.0.0.1:0', handler: async () => {}, connectionAgeMs: 300, connectionGraceMs: 300 })
  const port = await server.start()
  t.teardown(() => server.shutdown(1000))
  // Most of a message: its 5-byte prefix announces 1 MiB, 64 KiB follow, and the stream stays open.
  const session = connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  t.teardown(() => session.destroy())
  const stream = session.request({ ':method': 'POST', ':path': `/${SERVICES.traces}/Export`, 'content-type': 'application/grpc', te: 'trailers' })
  stream.on('error', () => {})
  const prefix = Buffer.alloc(5)
  prefix.writeUInt32BE(1024 * 1024, 1)
  stream.write(Buffer.concat([prefix, Buffer.alloc(64 * 1024, 0x0a)]))
  const started = Date.now()
  const closed = await Promise.race([new Promise<boolean>((r) => stream.on('close', () => r(true))), new Promise<boolean>((r) => setTimeout(() => r(false), 5000))])
  t.ok(closed, `the stalled call is closed (after ${Date.now() - started} ms), its bytes released`)

  // A real exporter keeps one channel: every export succeeds across several connection ages.
  const exporter = new OTLPTraceExporter({ url: `http://127.0.0.1:${port}` })
  t.teardown(() => exporter.shutdown())
  const spans = await genAiSpans()
  for (let i = 0; i < 8; i++) {
    const result = await exportSpans(exporter, spans)
    t.equal(result.code, 0, `export ${i} succeeds`)
    await new Promise((r) => setTimeout(r, 150))
  }
})

t.test('shutdown lets a call in flight finish', async (t) => {
  let release!: () => void
  const gate = new Promise<void>((r) => (release = r))
  const server = new OtlpGrpcServer({ endpoint: '127.0.0.1:0', handler: () => gate })
  const port = await server.start()
  const pending = rawGrpcExport(port, 'traces', new Uint8Array(0))
  await new Promise((r) => setTimeout(r, 100))
  const stopped = server.shutdown(5000)
  release()
  const res = await pending
  await stopped
  t.notOk(res.err, 'the call in flight was answered')
  const late = await rawGrpcExport(port, 'traces', new Uint8Array(0))
  t.equal(late.err?.code, status.UNAVAILABLE, 'new calls are refused once it stopped')
})

/** One Export call over a raw HTTP/2 stream: the message frame as given (flag byte included), the status as answered. */
async function rawFrame(t: Test, port: number, frame: Buffer, headers: Record<string, string> = {}): Promise<{ status?: number; message?: string }> {
  const session = connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  t.teardown(() => session.destroy())
  const stream = session.request({ ':method': 'POST', ':path': `/${SERVICES.traces}/Export`, 'content-type': 'application/grpc', te: 'trailers', ...headers })
  stream.on('error', () => {})
  stream.on('data', () => {})
  return new Promise((resolve) => {
    let got: { status?: number; message?: string } = {}
    // A status without a message comes in the headers (trailers-only), else in the trailers.
    const read = (h: Record<string, unknown>) => {
      if (h['grpc-status'] !== undefined) got = { status: Number(h['grpc-status']), message: decodeURIComponent(String(h['grpc-message'] ?? '')) }
    }
    stream.on('response', read)
    stream.on('trailers', read)
    stream.on('close', () => resolve(got))
    stream.end(frame)
  })
}

function grpcFrame(payload: Buffer, compressed: boolean): Buffer {
  const prefix = Buffer.alloc(5)
  prefix.writeUInt8(compressed ? 1 : 0, 0)
  prefix.writeUInt32BE(payload.length, 1)
  return Buffer.concat([prefix, payload])
}

t.test("a message flagged compressed whose gzip is corrupt is INVALID_ARGUMENT (the client's data), not INTERNAL", async (t) => {
  const srv = await startServer(t)
  const valid = protoOf('traces', jsonSpans([{ traceId: 'ab'.repeat(16), spanId: 'cd'.repeat(8), name: 'a span', startTimeUnixNano: '1' }]))
  const gz = gzipSync(valid)
  const cases: [string, Buffer][] = [
    ['not gzip at all', Buffer.from('this is not gzip data')],
    ['gzip cut short', gz.subarray(0, gz.length - 6)],
    ['gzip with a flipped byte', Buffer.from(gz).fill(0xff, 12, 20)],
  ]
  for (const [name, body] of cases) {
    const res = await rawFrame(t, srv.port, grpcFrame(body, true), { 'grpc-encoding': 'gzip' })
    t.equal(res.status, status.INVALID_ARGUMENT, `${name}: INVALID_ARGUMENT`)
    t.match(res.message, /bad_encoding: .*not valid data of its grpc-encoding/, `${name}: the message says why`)
  }
  const ok = await rawFrame(t, srv.port, grpcFrame(gz, true), { 'grpc-encoding': 'gzip' })
  t.equal(ok.status, status.OK, 'the same message, validly gzipped, is accepted')
  t.equal(srv.seen.length, 1, 'the handler saw only the valid one')
  const fromGrpcJs = await rawGrpcExport(srv.port, 'traces', valid, { gzip: true })
  t.notOk(fromGrpcJs.err, 'and so is a compressed export from the grpc-js client')
})

t.test('gRPC messages count against server.max_body_bytes_in_flight with HTTP bodies: past it UNAVAILABLE with RetryInfo', async (t) => {
  const limit = bodyBudget.limit
  bodyBudget.limit = 1024 * 1024
  t.teardown(() => void (bodyBudget.limit = limit))
  let gate: Promise<void> | undefined
  const srv = await startServer(t, () => gate ?? Promise.resolve())
  /** An export of `n` spans of about 100 KB each. */
  const exportOf = (n: number) =>
    protoOf('traces', jsonSpans(Array.from({ length: n }, (_, i) => ({ traceId: 'ab'.repeat(16), spanId: (i + 1).toString(16).padStart(16, '0'), startTimeUnixNano: '1', attributes: [{ key: 'p', value: { stringValue: 'x'.repeat(100_000) } }] }))))
  const body = exportOf(4)
  t.ok(body.length > 400_000 && body.length < 500_000, 'a message of about 400 KB')

  // An HTTP body of 700 KB being received holds its bytes: the 400 KB message does not fit beside it.
  t.ok(bodyBudget.take(700_000))
  const refused = await rawGrpcExport(srv.port, 'traces', body)
  t.equal(refused.err?.code, status.UNAVAILABLE, 'UNAVAILABLE: OTLP exporters retry it')
  t.match(refused.err?.details, /overloaded: .*max_body_bytes_in_flight/)
  const st = RpcStatus.decode(refused.err!.metadata.get('grpc-status-details-bin')[0] as Buffer) as any
  t.equal(Number((RetryInfo.decode(st.details[0].value) as any).retryDelay.seconds), 1, 'with RetryInfo: retry in 1 s')
  t.equal(srv.seen.length, 0, 'the handler never saw it')
  bodyBudget.give(700_000)
  t.notOk((await rawGrpcExport(srv.port, 'traces', body)).err, 'once the body is gone the same message goes through')

  // A message being handled holds its bytes until it is answered.
  let release!: () => void
  gate = new Promise<void>((r) => (release = r))
  const slow = rawGrpcExport(srv.port, 'traces', exportOf(7))
  await until(() => srv.seen.length === 2)
  t.notOk(bodyBudget.take(400_000), 'an HTTP body of 400 KB is refused while a 700 KB message is handled')
  t.equal((await rawGrpcExport(srv.port, 'traces', body)).err?.code, status.UNAVAILABLE, 'and so is a second message')
  release()
  t.notOk((await slow).err, 'the held message is answered')
  t.ok(bodyBudget.take(1024 * 1024), 'and gave its bytes back')
  bodyBudget.give(1024 * 1024)

  // One message alone always goes through, even above the bound: a bound below the largest
  // message must not refuse it for good.
  gate = undefined
  const huge = exportOf(12)
  t.ok(huge.length > 1024 * 1024, `a message of ${huge.length} bytes, above the bound`)
  t.notOk((await rawGrpcExport(srv.port, 'traces', huge)).err, 'alone, it is accepted')
})

async function until(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !cond(); i++) await new Promise((r) => setTimeout(r, 10))
}
