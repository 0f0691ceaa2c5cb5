// The dashboard extension as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type, type Static } from '@sinclair/typebox'
import type { Descriptor, ExtensionFactory } from '../../host/component.js'

const schema = Type.Object(
  {
    refresh_seconds: Type.Integer({ default: 5, minimum: 1, maximum: 3600, description: 'How often the open dashboard asks for fresh answers' }),
  },
  { additionalProperties: false },
)
export type Config = Static<typeof schema>

export const dashboardDescriptor: Descriptor<ExtensionFactory<typeof schema>> = {
  kind: 'extension',
  type: 'dashboard',
  description: 'The dashboard at /ui: charts of the analytics answers and the alerts, read with the user\'s API key',
  schema,
}
