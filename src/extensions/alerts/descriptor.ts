// The alerts extension as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type, type Static } from '@sinclair/typebox'
import type { Descriptor, ExtensionFactory } from '../../host/component.js'

const schema = Type.Object(
  {
    evaluation_interval_seconds: Type.Number({ default: 10, minimum: 0.1, maximum: 3600, description: 'How often every enabled rule is evaluated' }),
    export_configurations: Type.String({
      default: 'exportconfigs',
      description: 'Id of the exportconfigs extension whose delivery engine sends alert.triggered / alert.resolved events (and Slack messages); without it alerts are only recorded',
    }),
    max_rules_per_team: Type.Integer({ default: 200, minimum: 1, description: 'Most rules one team may hold' }),
  },
  { additionalProperties: false },
)
export type Config = Static<typeof schema>

export const alertsDescriptor: Descriptor<ExtensionFactory<typeof schema>> = {
  kind: 'extension',
  type: 'alerts',
  description: 'Cost and performance alerts: rules at /{api_prefix}/v2/api/sources/ai/anomaly, evaluated continuously, delivered as signed webhooks and Slack messages',
  schema,
}
