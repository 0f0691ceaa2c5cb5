// The webhook exporter as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type, type Static } from '@sinclair/typebox'
import type { Descriptor, ExporterFactory } from '../../host/component.js'

const schema = Type.Object(
  {
    export_configurations: Type.String({
      default: 'exportconfigs',
      description: 'Id of the exportconfigs extension whose configurations and delivery engine this exporter uses',
    }),
    configurations: Type.Array(Type.String({ minLength: 1 }), {
      default: [],
      description: "Names of the export configurations this exporter delivers to (e.g. one organization's webhook behind a routing connector); empty = every configuration of the record's team",
    }),
  },
  { additionalProperties: false },
)
export type Config = Static<typeof schema>

export const webhookDescriptor: Descriptor<ExporterFactory<typeof schema>> = {
  kind: 'exporter',
  type: 'webhook',
  description: 'Signed webhook deliveries of usage events to export configurations (durable queue, retries)',
  signals: ['usage'],
  schema,
  check(config, ctx) {
    if (ctx.extensionType(config.export_configurations) !== 'exportconfigs')
      ctx.issue(
        'export_configurations',
        `needs the exportconfigs extension "${config.export_configurations}": configure it under extensions and list it in service.extensions`,
      )
  },
}
