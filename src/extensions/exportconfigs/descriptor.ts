// The exportconfigs extension as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type, type Static } from '@sinclair/typebox'
import type { Descriptor, ExtensionFactory } from '../../host/component.js'
import { DestinationGuard } from '../../domain/webhooks/destination.js'

const schema = Type.Object(
  {
    master_key: Type.String({
      default: '',
      description:
        'Encrypts signing secrets at rest (AES-256-GCM), e.g. ${env:METERD_MASTER_KEY}; empty = a random key generated on first start in master.key in the data directory (storage.path; 0600; back it up with data.mdb)',
    }),
    allow_private_destinations: Type.Array(Type.String(), {
      default: [],
      description: 'Addresses or CIDRs (127.0.0.1, 10.0.0.0/8) webhooks may reach although private, loopback or link-local',
    }),
    retry_schedule_seconds: Type.Array(Type.Number({ minimum: 0 }), {
      default: [0, 5, 300, 1800, 7200, 18000, 36000, 36000],
      minItems: 1,
      description: 'Delay before each attempt (the first is usually 0 = at once); after the last attempt fails, the delivery is dead-lettered',
    }),
    retry_jitter: Type.Number({ default: 0.2, minimum: 0, maximum: 1, description: 'Each retry delay is stretched by up to this fraction, at random' }),
    timeout_ms: Type.Integer({ default: 15000, minimum: 100, maximum: 60000, description: 'Default per-attempt timeout (a configuration may set its own)' }),
    max_concurrency_per_endpoint: Type.Integer({ default: 4, minimum: 1, maximum: 256, description: 'Attempts in flight at once per destination origin' }),
    poll_interval_ms: Type.Integer({ default: 1000, minimum: 10, description: 'How often due retries and batch deadlines are checked' }),
    max_retry_after_seconds: Type.Integer({ default: 86400, minimum: 1, description: 'Upper bound on a receiver\'s Retry-After' }),
    max_configurations_per_team: Type.Integer({
      default: 100,
      minimum: 1,
      description:
        "Most export configurations one team may hold: each usage record is matched against every one of its team's, and queues a delivery for each that wants it in the record's own commit",
    }),
  },
  { additionalProperties: false },
)
export type Config = Static<typeof schema>

export const exportconfigsDescriptor: Descriptor<ExtensionFactory<typeof schema>> = {
  kind: 'extension',
  type: 'exportconfigs',
  description: 'Export configurations (webhooks): CRUD, signing-secret rotation, test events and the durable delivery engine',
  schema,
  check(config, ctx) {
    try {
      new DestinationGuard(config.allow_private_destinations)
    } catch (err) {
      ctx.issue('allow_private_destinations', (err as Error).message.replace(/^allow_private_destinations: /, ''))
    }
  },
}
