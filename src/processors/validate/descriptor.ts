// The validate processor as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type, type Static } from '@sinclair/typebox'
import type { Descriptor, ProcessorFactory } from '../../host/component.js'

const schema = Type.Object(
  {
    strict_attribution: Type.Boolean({
      default: false,
      description: 'Refuse (400) records without organizationName/productName, as SPEC marks them required; by default they are stored unattributed',
    }),
  },
  { additionalProperties: false },
)
export type Config = Static<typeof schema>

export const validateDescriptor: Descriptor<ProcessorFactory<typeof schema>> = {
  kind: 'processor',
  type: 'validate',
  description: 'Validates usage records against the published schemas; 400 naming the field on failure',
  signals: ['usage'],
  mutatesData: true,
  schema,
}
