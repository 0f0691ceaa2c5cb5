/** A plain grpc-js client for OTLP Export calls: the bytes go as they are (no SDK in between). */
import { Client, Metadata, credentials, type ServiceError } from '@grpc/grpc-js'
import type { OtlpSignal } from '../../src/transport/otlp/batch.js'
import { SERVICES } from '../../src/transport/otlp/proto.js'

export interface RawResult {
  err?: ServiceError
  response?: Buffer
}

/** One Export call (optionally gzip-compressed by the channel). */
export function rawGrpcExport(port: number, signal: OtlpSignal, body: Uint8Array, opts: { metadata?: Metadata; gzip?: boolean } = {}): Promise<RawResult> {
  const client = new Client(`127.0.0.1:${port}`, credentials.createInsecure(), { 'grpc.max_send_message_length': -1, ...(opts.gzip ? { 'grpc.default_compression_algorithm': 2 } : {}) })
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      `/${SERVICES[signal]}/Export`,
      (b: Buffer) => b,
      (b: Buffer) => b,
      Buffer.from(body),
      opts.metadata ?? new Metadata(),
      {},
      (err, response) => {
        client.close()
        resolve(err ? { err } : { response })
      },
    )
  })
}
