// The otlp receiver as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type, type Static } from '@sinclair/typebox'
import type { Descriptor, ReceiverFactory } from '../../host/component.js'

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
export type Config = Static<typeof schema>

export const otlpDescriptor: Descriptor<ReceiverFactory<typeof schema>> = {
  kind: 'receiver',
  type: 'otlp',
  description: 'OTLP traces, logs and metrics over HTTP (protobuf, JSON) and gRPC, with the same admission as REST',
  signals: ['traces', 'logs'],
  schema,
  check(config, ctx) {
    if (config.http.endpoint) ctx.listener('http.endpoint', config.http.endpoint)
    if (config.grpc.endpoint) ctx.listener('grpc.endpoint', config.grpc.endpoint)
  },
}
