// The attribution processor as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type, type Static } from '@sinclair/typebox'
import type { Descriptor, ProcessorFactory } from '../../host/component.js'

const schema = Type.Object(
  {
    default_environment_from_key: Type.Boolean({
      default: true,
      description: "A record without an environment dimension takes its API key's environment",
    }),
  },
  { additionalProperties: false },
)
export type Config = Static<typeof schema>

export const attributionDescriptor: Descriptor<ProcessorFactory<typeof schema>> = {
  kind: 'processor',
  type: 'attribution',
  description: 'Normalises attribution dimensions and stamps account/tenant/team/environment from the API key',
  signals: ['usage'],
  mutatesData: true,
  schema,
}
