/**
 * The stock OTLP/HTTP exporters (protobuf and JSON, plain and gzip) against the decoders: a bare
 * node:http server on 127.0.0.1 reads each body with meterd's body reader and decodes it, and the
 * items must be the spans and log records the SDK recorded, the same from both encodings. (The
 * OTLP receiver is not wired yet; this is the part of its path that exists.)
 */
import { createServer, type IncomingMessage } from 'node:http'
import { SeverityNumber } from '@opentelemetry/api'
import { OTLPLogExporter as LogsHttp } from '@opentelemetry/exporter-logs-otlp-http'
import { OTLPLogExporter as LogsProto } from '@opentelemetry/exporter-logs-otlp-proto'
import { OTLPTraceExporter as TracesHttp } from '@opentelemetry/exporter-trace-otlp-http'
import { OTLPTraceExporter as TracesProto } from '@opentelemetry/exporter-trace-otlp-proto'
import { CompressionAlgorithm } from '@opentelemetry/otlp-exporter-base'
import t, { type Test } from 'tap'
import { isJsonContentType, parseJson, readBody } from '../../src/transport/http/body.js'
import type { DecodedRequest } from '../../src/transport/otlp/batch.js'
import { decodeLogsJson, decodeTracesJson } from '../../src/transport/otlp/decode-json.js'
import { decodeLogsProto, decodeTracesProto } from '../../src/transport/otlp/decode-proto.js'
import { encodeLogs, encodeSpans, sdkLogs, sdkSpans } from '../helpers/otlp.js'

interface Received {
  path: string
  headers: IncomingMessage['headers']
  decoded: DecodedRequest
}

async function startBareServer(t: Test) {
  const received: Received[] = []
  const keys = { apiKeyAttributes: ['service.api_key', 'revenium.api_key'] }
  const server = createServer(async (req, res) => {
    const body = await readBody(req, 10 * 1024 * 1024)
    const json = isJsonContentType(req.headers['content-type'])
    const logs = req.url!.endsWith('/logs')
    const decoded = json
      ? (logs ? decodeLogsJson : decodeTracesJson)(parseJson(body, 64), keys)
      : (logs ? decodeLogsProto : decodeTracesProto)(body, keys)
    received.push({ path: req.url!, headers: req.headers, decoded })
    res.writeHead(200, { 'content-type': json ? 'application/json' : 'application/x-protobuf' })
    res.end(json ? '{}' : '')
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>((r) => server.close(() => r())))
  const { port } = server.address() as { port: number }
  return { url: `http://127.0.0.1:${port}`, received }
}

const exportWith = (exporter: { export(items: any, cb: (r: { code: number; error?: Error }) => void): void }, items: unknown) =>
  new Promise<{ code: number; error?: Error }>((resolve) => exporter.export(items, resolve))

t.test('spans from the protobuf and JSON trace exporters, plain and gzip, decode to what the SDK recorded', async (t) => {
  const srv = await startBareServer(t)
  const spans = await sdkSpans({ 'service.name': 'chatbot', 'revenium.api_key': 'hak_resource_key_000001', 'revenium.organization.name': 'AcmeOrg' }, (tracer) => {
    const s = tracer.startSpan('chat claude-sonnet-4-5', {
      attributes: {
        'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'anthropic', 'gen_ai.request.model': 'claude-sonnet-4-5',
        'gen_ai.usage.input_tokens': 5096, 'gen_ai.usage.output_tokens': 120, 'gen_ai.usage.cache_read.input_tokens': 4096,
        'gen_ai.response.finish_reasons': ['end_turn'], 'streaming': false, 'note': '',
      },
    })
    s.end()
  })
  const expected = decodeTracesProto(encodeSpans(spans).proto, { apiKeyAttributes: ['revenium.api_key'] })
  for (const [name, Exporter] of [['protobuf', TracesProto], ['json', TracesHttp]] as const) {
    for (const compression of [CompressionAlgorithm.NONE, CompressionAlgorithm.GZIP]) {
      const exporter = new Exporter({ url: `${srv.url}/v1/traces`, headers: { 'x-api-key': 'hak_header_key_000001' }, compression })
      const result = await exportWith(exporter, spans)
      await exporter.shutdown()
      t.equal(result.code, 0, `${name}/${compression}: exported`)
      const got = srv.received.at(-1)!
      t.equal(got.headers['x-api-key'], 'hak_header_key_000001')
      t.equal(got.headers['content-encoding'], compression === CompressionAlgorithm.GZIP ? 'gzip' : undefined, `${name}/${compression}: encoding as configured`)
      t.same(got.decoded, expected, `${name}/${compression}: the same items`)
    }
  }
  const item = expected.items[0]
  t.same(item.span.attributes['gen_ai.response.finish_reasons'], ['end_turn'])
  t.equal(item.span.attributes.streaming, false, 'a false boolean survives protobuf')
  t.equal(item.span.attributes.note, '', 'an empty string too')
  t.same(expected.apiKeys, ['hak_resource_key_000001'])
})

t.test('log records from the protobuf and JSON logs exporters decode alike', async (t) => {
  const srv = await startBareServer(t)
  const records = await sdkLogs({ 'service.name': 'claude-code', 'organization.name': 'Acme Dev' }, 'com.anthropic.claude_code.events', (logger) => {
    logger.emit({ body: 'claude_code.api_request', severityNumber: SeverityNumber.INFO, attributes: { 'event.name': 'api_request', model: 'claude-sonnet-4-5', input_tokens: 3, output_tokens: '412', cost_usd: 0.027387 } })
  })
  const expected = decodeLogsProto(encodeLogs(records).proto)
  for (const [name, Exporter] of [['protobuf', LogsProto], ['json', LogsHttp]] as const) {
    const exporter = new Exporter({ url: `${srv.url}/v1/logs`, compression: CompressionAlgorithm.GZIP })
    const result = await exportWith(exporter, records)
    await exporter.shutdown()
    t.equal(result.code, 0, `${name}: exported`)
    t.same(srv.received.at(-1)!.decoded, expected, `${name}: the same items`)
  }
})
