// The debug exporter as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type, type Static } from '@sinclair/typebox'
import type { Descriptor, ExporterFactory } from '../../host/component.js'

const schema = Type.Object(
  {
    verbosity: Type.Union([Type.Literal('basic'), Type.Literal('detailed')], {
      default: 'basic',
      description: 'basic: one line per batch; detailed: every record in full',
    }),
  },
  { additionalProperties: false },
)
export type Config = Static<typeof schema>

export const debugDescriptor: Descriptor<ExporterFactory<typeof schema>> = {
  kind: 'exporter',
  type: 'debug',
  description: 'Logs records through pino',
  signals: ['usage', 'traces', 'logs', 'metrics'],
  schema,
}
