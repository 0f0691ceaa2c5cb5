import type { Component, CreateSettings, Host, ReceiverFactory, SignalConsumers } from '../../host/component.js'
import { listenFailure } from '../../core/startup-error.js'
import { HttpServer } from '../../transport/http/server.js'
import type { OtlpGrpcServer } from '../../transport/grpc/server.js'
import { otlpGrpcServer } from './grpc.js'
import { OTLP_JSON_DEPTH, OtlpHttp } from './http.js'
import { otlpDescriptor, type Config } from './descriptor.js'

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

export const otlpFactory: ReceiverFactory<typeof otlpDescriptor.schema> = {
  ...otlpDescriptor,
  create: (settings, config, next) => new OtlpReceiver(settings, config, next),
}
