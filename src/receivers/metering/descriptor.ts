// The metering receiver as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type, type Static } from '@sinclair/typebox'
import type { Descriptor, ReceiverFactory } from '../../host/component.js'

const schema = Type.Object(
  {
    dedup_window_hours: Type.Number({ default: 24, minimum: 0, maximum: 840, description: 'How long a transactionId is remembered per team (up to 35 days)' }),
    idempotency_ttl_hours: Type.Number({ default: 24, minimum: 1, maximum: 168, description: 'How long an Idempotency-Key response is replayed' }),
    max_batch_items: Type.Integer({ default: 1000, minimum: 1, description: 'Most records one POST may carry as a JSON array' }),
  },
  { additionalProperties: false },
)
export type Config = Static<typeof schema>

export const meteringDescriptor: Descriptor<ReceiverFactory<typeof schema>> = {
  kind: 'receiver',
  type: 'metering',
  description: 'REST metering: POST /meter/v2/ai/completions, /ai/images, /ai/audio, /ai/video and /meter/v2/tool/events on the base URL',
  signals: ['usage'],
  schema,
}
