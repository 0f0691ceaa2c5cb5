import { Server, ServerCredentials, ServerInterceptingCall, setLogger, status, type ServerInterceptor, type ServerUnaryCall, type ServiceDefinition, type sendUnaryData } from '@grpc/grpc-js'
import { bodyBudget, overBudget } from '../http/body.js'
import { rejectionMessage, type DecodeOptions, type DecodedRequest, type OtlpSignal } from '../otlp/batch.js'
import { decodeLogsProto, decodeMetricsProto, decodeTracesProto } from '../otlp/decode-proto.js'
import { SERVICES } from '../otlp/proto.js'
import { encodeExportResponse } from '../otlp/response.js'
import { grpcFailure } from './status.js'

// grpc-js prints a failed bind on stderr itself; meterd reports it once, as a start-up failure
// naming the setting (src/core/startup-error.ts). Everything else grpc-js logs still shows.
setLogger({
  error: (...args: unknown[]) => {
    if (!/No address added/.test(args.join(' '))) console.error(...args)
  },
})

/** The request's metadata (lowercase keys, first text value of each) and the peer's address. */
export interface CallInfo {
  metadata: Record<string, string>
  peer: string
}

/** What the handler adds to the decoder's own rejections for the partial success. */
export interface ExportResult {
  /** Items the handler refused (the decoder's rejected items are counted by the server). */
  rejected?: number
  errorMessage?: string
}

/**
 * Admits and handles one decoded export. Resolving answers OK (with a partial success when
 * items were refused); throwing answers the status grpcFailure maps the error to.
 */
export type ExportHandler = (signal: OtlpSignal, request: DecodedRequest, call: CallInfo) => Promise<ExportResult | void>

export interface OtlpGrpcOptions {
  /** `host:port`; port 0 picks a free port (see `port` after start). */
  endpoint: string
  /** Largest message accepted, after decompression (a gzip bomb stops there): 10 MiB by default. */
  maxMessageBytes?: number
  decode?: DecodeOptions
  handler: ExportHandler
  /** Sees every call's final status, decoding failures included (e.g. for the error-pattern block). */
  onStatus?: (signal: OtlpSignal, code: status, call: CallInfo) => void
  /**
   * A connection is asked to go (GOAWAY) after this long (±10 %), and closed `connectionGraceMs`
   * later with any call still unfinished: 120 s and 60 s by default.
   */
  connectionAgeMs?: number
  connectionGraceMs?: number
}

export const DEFAULT_MAX_MESSAGE_BYTES = 10 * 1024 * 1024

const DECODERS = { traces: decodeTracesProto, logs: decodeLogsProto, metrics: decodeMetricsProto }
const identity = (b: Buffer): Buffer => b

/**
 * grpc-js inflates a message flagged compressed before any handler sees it, and answers bytes
 * that are not valid gzip/deflate with INTERNAL, which tells the client the server failed and
 * that a retry may help. The data is the client's: this answers INVALID_ARGUMENT, as HTTP
 * answers 400 bad_encoding. grpc-js sends that status from the call itself (`this.sendStatus`),
 * before any interceptor's listener hears of it, so the call's own sendStatus is wrapped; the
 * details string is grpc-js's (1.x), and any other status passes unchanged.
 */
const badCompression: ServerInterceptor = (_method, call) => {
  const send = call.sendStatus.bind(call)
  call.sendStatus = (s) =>
    send(s.code === status.INTERNAL && s.details === 'Failed to decompress message' ? { ...s, code: status.INVALID_ARGUMENT, details: 'bad_encoding: the message is flagged compressed but is not valid data of its grpc-encoding (gzip or deflate)' } : s)
  return new ServerInterceptingCall(call)
}

/**
 * OTLP/gRPC (DESIGN §3): TraceService, LogsService and MetricsService `Export` on their own
 * endpoint. Requests arrive as bytes (gzip already inflated by grpc-js, within the size limit)
 * and are decoded with meterd's protos here, so a malformed message is an INVALID_ARGUMENT the
 * server answers itself; everything else (admission, the pipelines) is the injected handler's.
 */
export class OtlpGrpcServer {
  private readonly server: Server
  private boundPort = 0

  constructor(private readonly opts: OtlpGrpcOptions) {
    const max = opts.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES
    this.server = new Server({
      interceptors: [badCompression],
      'grpc.max_receive_message_length': max,
      // grpc-js holds a message's bytes until the message is whole and has no time limit of its
      // own: a client that sends most of a 4 MiB message and stops held it for ever (a few hundred
      // such calls, gigabytes). A connection's age bounds every call on it, as requestTimeout
      // bounds an HTTP body; exporters reconnect on GOAWAY as they do after any server restart.
      'grpc.max_connection_age_ms': opts.connectionAgeMs ?? 120_000,
      'grpc.max_connection_age_grace_ms': opts.connectionGraceMs ?? 60_000,
    })
    for (const signal of ['traces', 'logs', 'metrics'] as const) {
      const definition: ServiceDefinition = {
        Export: {
          path: `/${SERVICES[signal]}/Export`,
          requestStream: false,
          responseStream: false,
          requestSerialize: identity,
          requestDeserialize: identity,
          responseSerialize: identity,
          responseDeserialize: identity,
        },
      }
      this.server.addService(definition, { Export: (call: ServerUnaryCall<Buffer, Buffer>, done: sendUnaryData<Buffer>) => void this.export(signal, call, done) })
    }
  }

  /** Listens; resolves with the bound port. */
  start(): Promise<number> {
    return new Promise((resolve, reject) => {
      this.server.bindAsync(this.opts.endpoint, ServerCredentials.createInsecure(), (err, port) => {
        if (err) return reject(err)
        this.boundPort = port
        resolve(port)
      })
    })
  }

  get port(): number {
    return this.boundPort
  }

  /** Stops accepting calls and lets those in flight finish, for at most `graceMs`. */
  shutdown(graceMs = 5000): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.server.forceShutdown()
        resolve()
      }, graceMs)
      this.server.tryShutdown(() => {
        clearTimeout(timer)
        resolve()
      })
    })
  }

  private async export(signal: OtlpSignal, call: ServerUnaryCall<Buffer, Buffer>, done: sendUnaryData<Buffer>): Promise<void> {
    const info: CallInfo = { metadata: metadataOf(call), peer: call.getPeer() }
    let code: status = status.OK
    // The message counts against server.max_body_bytes_in_flight with HTTP bodies while it is
    // decoded and handled (grpc-js hands it over whole, inflated): past the bound the call is
    // UNAVAILABLE with RetryInfo, which OTLP exporters retry; one message alone always goes through.
    const bytes = call.request.length
    let held = false
    try {
      if (!(held = bodyBudget.take(bytes))) throw overBudget()
      const decoded = DECODERS[signal](call.request, this.opts.decode)
      const result = (await this.opts.handler(signal, decoded, info)) ?? {}
      const rejected = decoded.rejectedCount + (result.rejected ?? 0)
      const messages = [decoded.rejectedCount ? rejectionMessage(decoded.rejected, decoded.rejectedCount) : '', result.errorMessage ?? ''].filter(Boolean)
      done(null, Buffer.from(encodeExportResponse(signal, { rejected, errorMessage: messages.join('; ') })))
    } catch (err) {
      const failure = grpcFailure(err)
      code = failure.code
      done({ code: failure.code, details: failure.details, metadata: failure.metadata })
    } finally {
      if (held) bodyBudget.give(bytes)
      this.opts.onStatus?.(signal, code, info)
    }
  }
}

function metadataOf(call: ServerUnaryCall<Buffer, Buffer>): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(call.metadata.getMap())) if (typeof v === 'string') out[k] = v
  return out
}
