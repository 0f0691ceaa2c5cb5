import { Type, type Static } from '@sinclair/typebox'
import type { Component, CreateSettings, Host, ReceiverFactory, SignalConsumers } from '../../host/component.js'
import { listenFailure } from '../../core/startup-error.js'
import { HttpServer } from '../../transport/http/server.js'
import type { OtlpGrpcServer } from '../../transport/grpc/server.js'
import { otlpGrpcServer } from './grpc.js'
import { OTLP_JSON_DEPTH, OtlpHttp } from './http.js'

const MiB = 1024 * 1024

const schema = Type.Object(
  {
    grpc: Type.Object(
      {
        endpoint: Type.String({ default: '127.0.0.1:4317', description: "OTLP/gRPC listener (TraceService, LogsService, MetricsService); '' turns it off" }),
        max_message_bytes: Type.Integer({ default: 4 * MiB, minimum: 1024, description: 'Largest export accepted, after decompression (RESOURCE_EXHAUSTED above it)' }),
      },
      { additionalProperties: false, default: {} },
    ),
    http: Type.Object(
      {
        base_url: Type.Boolean({
          default: true,
          description: 'Serve OTLP/HTTP on the base URL: /meter/v2/otlp/v1/{traces,logs,metrics}, /v2/otlp/v1/…, the unified /meter/v2/otlp and /v2/otlp, and the older /meter/v2/ai/otlp/v1/… and /meter/v2/otel/v1/metrics',
        }),
        endpoint: Type.String({ default: '', description: "An own listener with the standard paths /v1/traces, /v1/logs, /v1/metrics (e.g. 127.0.0.1:4318); '' for none" }),
        max_request_bytes: Type.Integer({ default: 4 * MiB, minimum: 1024, description: 'Largest OTLP/HTTP body, after decompression (413 above it)' }),
      },
      { additionalProperties: false, default: {} },
    ),
    api_key_attributes: Type.Array(Type.String({ minLength: 1 }), {
      default: ['service.api_key', 'revenium.api_key'],
      description: 'Resource attributes that may carry the API key of clients that cannot set headers; they are removed before anything is stored or forwarded',
    }),
  },
  { additionalProperties: false },
)
type Config = Static<typeof schema>

/** Base-URL paths real clients post OTLP to (wire-contract §4), and what each carries. */
const BASE_PATHS: [string, 'traces' | 'logs' | 'metrics' | 'any', boolean?][] = [
  ...(['/meter/v2/otlp', '/v2/otlp', '/meter/v2/ai/otlp'] as const).flatMap((p) =>
    (['traces', 'logs', 'metrics'] as const).map((s): [string, 'traces' | 'logs' | 'metrics'] => [`${p}/v1/${s}`, s]),
  ),
  ['/meter/v2/otlp', 'any'],
  ['/v2/otlp', 'any'],
  ['/meter/v2/otel/v1/metrics', 'metrics', true],
]

/**
 * The `otlp` receiver (DESIGN §2, §3): OpenTelemetry traces, logs and metrics over HTTP — on the
 * base URL under the paths real clients use, and optionally on a listener of its own — and over
 * gRPC, all with the admission every route has. Traces and logs go to the pipelines that list
 * the receiver (the genai connector makes usage records of them); metrics are accepted and
 * counted, so exporters that always send them log no errors.
 */
export class OtlpReceiver implements Component {
  private grpc?: OtlpGrpcServer
  private own?: HttpServer

  constructor(private readonly settings: CreateSettings, private readonly config: Config, private readonly next: SignalConsumers) {}

  async start(host: Host): Promise<void> {
    // When the traces pipelines read only some spans (the genai connector alone reads GenAI spans),
    // the others are checked and counted without being decoded.
    const decode = { apiKeyAttributes: this.config.api_key_attributes, spans: this.next.traces?.spanInterest }
    const target = { receiver: this.settings.id, next: this.next, metrics: this.settings.metrics }
    const http = new OtlpHttp({
      target,
      maxRequestBytes: this.config.http.max_request_bytes,
      maxJsonDepth: Math.max(host.server.max_json_depth, OTLP_JSON_DEPTH),
      decode,
      now: () => host.now(),
    })
    if (this.config.http.base_url) http.mount(host.http, BASE_PATHS)
    if (this.config.http.endpoint) {
      this.own = new HttpServer({ ...host.http.opts, logger: this.settings.logger })
      http.mount(this.own, [['/v1/traces', 'traces'], ['/v1/logs', 'logs'], ['/v1/metrics', 'metrics']])
      const addr = await this.own.listen(this.config.http.endpoint).catch((err) => {
        throw listenFailure(err, this.config.http.endpoint, `receivers.${this.settings.id}.http.endpoint`)
      })
      this.settings.logger.info({ address: `${addr.address}:${addr.port}` }, 'OTLP/HTTP listening')
    }
    if (this.config.grpc.endpoint) {
      this.grpc = otlpGrpcServer({
        endpoint: this.config.grpc.endpoint,
        maxMessageBytes: this.config.grpc.max_message_bytes,
        target,
        decode,
        admission: host.admission,
      })
      const port = await this.grpc.start().catch((err) => {
        throw listenFailure(err, this.config.grpc.endpoint, `receivers.${this.settings.id}.grpc.endpoint`)
      })
      this.settings.logger.info({ endpoint: this.config.grpc.endpoint, port }, 'OTLP/gRPC listening')
    }
  }

  /** The bound ports (tests start on port 0). */
  get ports(): { grpc?: number; http?: number } {
    return { grpc: this.grpc?.port, http: this.own?.address()?.port }
  }

  async shutdown(): Promise<void> {
    await Promise.all([this.grpc?.shutdown(5000), this.own?.close(5000)])
    this.grpc = undefined
    this.own = undefined
  }
}

export const otlpFactory: ReceiverFactory<typeof schema> = {
  kind: 'receiver',
  type: 'otlp',
  description: 'OTLP traces, logs and metrics over HTTP (protobuf, JSON) and gRPC, with the same admission as REST',
  signals: ['traces', 'logs'],
  schema,
  check(config, ctx) {
    if (config.http.endpoint) ctx.listener('http.endpoint', config.http.endpoint)
    if (config.grpc.endpoint) ctx.listener('grpc.endpoint', config.grpc.endpoint)
  },
  create: (settings, config, next) => new OtlpReceiver(settings, config, next),
}
