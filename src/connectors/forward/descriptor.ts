// The forward connector as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type } from '@sinclair/typebox'
import type { ConnectorFactory, Descriptor } from '../../host/component.js'
import { SIGNALS } from '../../core/consumer.js'

const schema = Type.Object({}, { additionalProperties: false })

export const forwardDescriptor: Descriptor<ConnectorFactory<typeof schema>> = {
  kind: 'connector',
  type: 'forward',
  description: 'Joins pipelines of one signal: exporter of one, receiver of others',
  connects: SIGNALS.map((s) => [s, s] as const),
  schema,
}
