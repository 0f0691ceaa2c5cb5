// The filter processor as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type, type Static } from '@sinclair/typebox'
import type { CheckContext, Descriptor, ProcessorFactory } from '../../host/component.js'
import type { ConfigIssue } from '../../core/config/schema.js'
import { conditionIssue } from '../../domain/conditions/index.js'

const schema = Type.Object(
  {
    keep: Type.Optional(Type.String({ minLength: 1, description: 'Keep only the records that meet this condition (docs/routing.md); set keep or drop, not both' })),
    drop: Type.Optional(Type.String({ minLength: 1, description: 'Drop the records that meet this condition' })),
  },
  { additionalProperties: false },
)
export type Config = Static<typeof schema>

function check(config: Config, ctx: CheckContext): ConfigIssue[] {
  if ((config.keep === undefined) === (config.drop === undefined)) return [{ path: ctx.path, message: 'set exactly one of keep or drop' }]
  const key = config.keep !== undefined ? 'keep' : 'drop'
  const bad = conditionIssue(config[key]!, ctx.signals, `${ctx.path}.${key}`)
  return bad ? [bad] : []
}

export const filterDescriptor: Descriptor<ProcessorFactory<typeof schema>> = {
  kind: 'processor',
  type: 'filter',
  description: 'Keeps or drops records by a condition; dropped records are still answered 201 and counted per processor',
  signals: ['usage', 'traces', 'logs'],
  mutatesData: false,
  schema,
  check,
}
