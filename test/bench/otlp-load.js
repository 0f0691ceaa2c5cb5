/**
 * What otlp.bench.js and otlp-cpu.bench.js send and measure against: one export of 100 spans
 * (every tenth a GenAI chat span with a response id never used before, so each export stores
 * ten usage records) and the bare servers that decode the same bodies with the same protos
 * and answer an empty Export response.
 */
import { randomBytes } from 'node:crypto'
import { PACKAGE_ROOT } from './lib.js'

const { ExportTraceServiceRequest } = await import('../../dist/src/transport/otlp/proto.js')

export const SPANS = 100

/** A function that makes one export per call; `tag` keeps response ids apart between runs. */
export function exportMaker(tag) {
  let seq = 0
  return function exportBody() {
    const now = BigInt(Date.now()) * 1_000_000n
    const kv = (key, value) => ({ key, value })
    const spans = []
    for (let i = 0; i < SPANS; i++) {
      const attributes = [kv('http.request.method', { stringValue: 'POST' }), kv('http.route', { stringValue: '/api/answer' }), kv('http.response.status_code', { intValue: 200 }), kv('server.address', { stringValue: 'api.example.com' })]
      if (i % 10 === 0)
        attributes.push(
          kv('gen_ai.operation.name', { stringValue: 'chat' }),
          kv('gen_ai.provider.name', { stringValue: 'openai' }),
          kv('gen_ai.request.model', { stringValue: 'gpt-4o' }),
          kv('gen_ai.response.id', { stringValue: `chatcmpl-${tag}-${seq++}` }),
          kv('gen_ai.usage.input_tokens', { intValue: 1200 }),
          kv('gen_ai.usage.output_tokens', { intValue: 300 }),
        )
      spans.push({ traceId: randomBytes(16), spanId: randomBytes(8), name: i % 10 === 0 ? 'chat gpt-4o' : 'POST /api/answer', kind: 3, startTimeUnixNano: String(now), endTimeUnixNano: String(now + 1_234_567n), attributes, status: { code: 1 } })
    }
    const msg = { resourceSpans: [{ resource: { attributes: [kv('service.name', { stringValue: 'bench' }), kv('revenium.organization.name', { stringValue: 'AcmeOrg' })] }, scopeSpans: [{ scope: { name: 'bench' }, spans }] }] }
    return Buffer.from(ExportTraceServiceRequest.encode(ExportTraceServiceRequest.fromObject(msg)).finish())
  }
}

const proto = JSON.stringify(PACKAGE_ROOT + '/dist/src/transport/otlp/proto.js')

/** A bare node:http server (for spawnScript, on $PORT) that decodes each export with protobufjs and answers. */
export const BARE_HTTP = `
  import { createServer } from 'node:http'
  const { ExportTraceServiceRequest } = await import(${proto})
  createServer((req, res) => {
    const chunks = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      if (req.method === 'POST') ExportTraceServiceRequest.decode(Buffer.concat(chunks))
      res.writeHead(200, { 'content-type': 'application/x-protobuf', 'content-length': 0 })
      res.end()
    })
  }).listen(Number(process.env.PORT), '127.0.0.1')
`

/** A bare @grpc/grpc-js TraceService on $GRPC_PORT that decodes and answers; ready on $PORT over HTTP. */
export const BARE_GRPC = `
  import { createServer } from 'node:http'
  import * as grpc from '@grpc/grpc-js'
  const { ExportTraceServiceRequest, SERVICES } = await import(${proto})
  const id = (b) => b
  const server = new grpc.Server({ 'grpc.max_receive_message_length': 4 * 1024 * 1024 })
  server.addService({ Export: { path: '/' + SERVICES.traces + '/Export', requestStream: false, responseStream: false, requestSerialize: id, requestDeserialize: id, responseSerialize: id, responseDeserialize: id } }, {
    Export: (call, done) => { ExportTraceServiceRequest.decode(call.request); done(null, Buffer.alloc(0)) },
  })
  server.bindAsync('127.0.0.1:' + process.env.GRPC_PORT, grpc.ServerCredentials.createInsecure(), () => {
    createServer((_, res) => res.end('ok')).listen(Number(process.env.PORT), '127.0.0.1')
  })
`
