// The lmdb exporter as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type, type Static } from '@sinclair/typebox'
import type { Descriptor, ExporterFactory } from '../../host/component.js'

const schema = Type.Object(
  {
    query_api: Type.Boolean({ default: true, description: 'Serve the read-back endpoints under /{api_prefix}/v2/api/sources/metrics/' }),
    dedup_sweep_minutes: Type.Number({ default: 60, minimum: 1, description: 'How often expired Idempotency-Key replay entries are removed (dedup entries stay: they index records by transactionId)' }),
    retention_hours: Type.Number({ default: 840, minimum: 1, description: 'How long Idempotency-Key replay entries are kept at most (the receivers decide their own windows within it), and the dedup window of records whose receiver sets none' }),
  },
  { additionalProperties: false },
)
export type Config = Static<typeof schema>

export const lmdbDescriptor: Descriptor<ExporterFactory<typeof schema>> = {
  kind: 'exporter',
  type: 'lmdb',
  description: 'Durable usage store in LMDB (under storage.path), with the read-back endpoints',
  signals: ['usage'],
  schema,
}
