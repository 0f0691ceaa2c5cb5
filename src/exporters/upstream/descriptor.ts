// The upstream exporter as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type, type Static } from '@sinclair/typebox'
import type { Descriptor, ExporterFactory } from '../../host/component.js'
import { endpointIssue } from './sender.js'

/** The longest delay a Node timer can wait (a longer one fires at once). */
const MAX_MS = 2_147_483_647

const schema = Type.Object(
  {
    endpoint: Type.String({ pattern: '^https?://[^\\s]+$', description: 'Base URL of the upstream meterd (or the vendor API), e.g. https://meterd-gateway:8080; the metering paths are appended to its path (a trailing /meter/v2 is dropped first)', examples: ['https://meterd-gateway:8080'] }),
    api_key: Type.String({ minLength: 1, description: 'The key the upstream authenticates these records with, e.g. ${env:METERD_UPSTREAM_API_KEY}', examples: ['${env:METERD_UPSTREAM_API_KEY}'] }),
    max_queue_records: Type.Integer({ default: 1_000_000, minimum: 1, description: 'Records the local queue holds at most; when full, requests are answered 503 with Retry-After (an empty queue takes any request, so it may exceed this by one request)' }),
    batch_size: Type.Integer({
      default: 500,
      minimum: 1,
      maximum: 1000,
      description: "Records per upstream request. An upstream whose max_batch_items is smaller answers 413 batch_too_large: the exporter then sends that many (or half as many, when the upstream does not say) until it restarts, and logs a warning",
    }),
    timeout_ms: Type.Integer({ default: 10_000, minimum: 100, maximum: MAX_MS, description: 'Per-request timeout' }),
    initial_backoff_ms: Type.Integer({ default: 500, minimum: 1, maximum: MAX_MS, description: 'First delay after a failed send; doubles per consecutive failure' }),
    max_backoff_ms: Type.Integer({ default: 60_000, minimum: 1, maximum: MAX_MS, description: 'Longest delay between retries (also caps an upstream Retry-After)' }),
    jitter: Type.Number({ default: 0.2, minimum: 0, maximum: 1, description: 'Each delay is stretched by up to this fraction, at random' }),
  },
  { additionalProperties: false },
)
export type Config = Static<typeof schema>

export const upstreamDescriptor: Descriptor<ExporterFactory<typeof schema>> = {
  kind: 'exporter',
  type: 'upstream',
  description: 'Forwards usage records to an upstream meterd or the vendor API through a persistent local queue (sidecar mode)',
  signals: ['usage'],
  schema,
  check(config, ctx) {
    const bad = endpointIssue(config.endpoint)
    if (bad) ctx.issue('endpoint', bad)
  },
}
