/**
 * server.max_body_bytes_in_flight: the bodies a process is receiving at once (and the OTLP/gRPC
 * messages it is handling) are bounded together, so clients that send most of a body and stop
 * cannot hold memory without limit.
 */
import { connect, type Socket } from 'node:net'
import { Metadata, status } from '@grpc/grpc-js'
import t from 'tap'
import type { OtlpReceiver } from '../../src/receivers/otlp/index.js'
import { rawGrpcExport } from '../helpers/grpc.js'
import { jsonSpans, protoOf } from '../helpers/otlp.js'
import { ADMIN_KEY, call, startMeterd } from '../helpers/meterd.js'
import { completion } from '../fixtures/wire-examples.js'

const C = '/meter/v2/ai/completions'

/** Opens a POST that declares `declared` bytes and sends `sent` of them; collects what comes back. */
function stalledUpload(url: string, declared: number, sent: number): { socket: Socket; answer: () => string } {
  const { port } = new URL(url)
  const socket = connect(Number(port), '127.0.0.1')
  let out = ''
  socket.on('data', (d) => (out += d))
  socket.on('error', () => undefined)
  socket.write(`POST ${C} HTTP/1.1\r\nhost: x\r\nx-api-key: ${ADMIN_KEY}\r\ncontent-type: application/json\r\ncontent-length: ${declared}\r\n\r\n`)
  socket.write(Buffer.alloc(sent, 0x20))
  return { socket, answer: () => out }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

t.test('bodies received at once past server.max_body_bytes_in_flight are refused with 503 overloaded, and the bytes come back', async (t) => {
  const m = await startMeterd(t, { config: { server: { max_body_bytes: 1048576, max_body_bytes_in_flight: 1048576 } } })
  const a = stalledUpload(m.url, 1_000_000, 700_000)
  await sleep(300)
  const b = stalledUpload(m.url, 1_000_000, 700_000)
  let answer = ''
  for (let i = 0; i < 100 && !answer.includes('\r\n\r\n'); i++) {
    await sleep(20)
    answer = b.answer()
  }
  t.match(answer, /^HTTP\/1\.1 503 /, 'the second stalled upload is refused while the first holds its bytes')
  t.match(answer, /retry-after: 1/i)
  t.match(answer, /"code":"overloaded"/)
  t.match(answer, /max_body_bytes_in_flight/)
  t.equal(a.answer(), '', 'the first is still being received')

  a.socket.destroy()
  b.socket.destroy()
  await sleep(200)
  // Both connections gone: their bytes are given back, and a large body alone is read again.
  const big = completion({ transactionId: 'after-the-stall' }) as Record<string, unknown>
  big.usageMetadata = { note: 'x'.repeat(900_000) }
  const res = await call(`${m.url}${C}`, { key: ADMIN_KEY, body: big })
  t.equal(res.status, 201, JSON.stringify(res.body).slice(0, 300))
})

t.test('an OTLP/gRPC export counts against the same budget: beside a stalled HTTP upload it is UNAVAILABLE, alone it is stored', async (t) => {
  const m = await startMeterd(t, { config: { server: { max_body_bytes: 1048576, max_body_bytes_in_flight: 1048576 } } })
  const grpcPort = m.service.component<OtlpReceiver>('receiver', 'otlp')!.ports.grpc!
  const attribute = { key: 'payload', value: { stringValue: 'x'.repeat(400_000) } }
  const body = protoOf('traces', jsonSpans([{ traceId: 'ab'.repeat(16), spanId: 'cd'.repeat(8), name: 'chat gpt-4o', startTimeUnixNano: '1', attributes: [attribute] }]))
  const metadata = new Metadata()
  metadata.set('x-api-key', ADMIN_KEY)

  const stalled = stalledUpload(m.url, 1_000_000, 700_000)
  await sleep(300)
  const refused = await rawGrpcExport(grpcPort, 'traces', body, { metadata })
  t.equal(refused.err?.code, status.UNAVAILABLE, 'UNAVAILABLE while the upload holds 700 KB of the 1 MiB')
  t.match(refused.err?.details, /overloaded: .*max_body_bytes_in_flight/)
  t.equal(stalled.answer(), '', 'the upload is still being received')

  stalled.socket.destroy()
  await sleep(200)
  const accepted = await rawGrpcExport(grpcPort, 'traces', body, { metadata })
  t.notOk(accepted.err, 'with the upload gone the same export is accepted')
})

t.test('a body alone in flight is read whole though it is larger than server.max_body_bytes_in_flight', async (t) => {
  // The bound may be set below the largest body a route takes (1 MiB here, bodies up to 4 MiB):
  // counting the body's own earlier chunks refused it part-way with 503, on every retry.
  const m = await startMeterd(t, { config: { server: { max_body_bytes: 4194304, max_body_bytes_in_flight: 1048576 } } })
  const big = completion({ transactionId: 'alone-past-the-bound' }) as Record<string, unknown>
  big.usageMetadata = { note: 'x'.repeat(2_500_000) }
  const res = await call(`${m.url}${C}`, { key: ADMIN_KEY, body: big })
  t.equal(res.status, 201, JSON.stringify(res.body).slice(0, 300))
})
