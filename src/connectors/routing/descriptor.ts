// The routing connector as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type, type Static } from '@sinclair/typebox'
import type { CheckContext, ConnectorFactory, Descriptor } from '../../host/component.js'
import type { ConfigIssue } from '../../core/config/schema.js'
import type { Signal } from '../../core/consumer.js'
import { conditionIssue } from '../../domain/conditions/index.js'

const Route = Type.Object(
  {
    condition: Type.String({ minLength: 1, description: 'A condition on the record (docs/routing.md), e.g. `organizationName == "AcmeOrg"`' }),
    pipelines: Type.Array(Type.String(), { minItems: 1, description: 'Pipelines the matching records go to; each must list this connector among its receivers' }),
  },
  { additionalProperties: false },
)

const schema = Type.Object(
  {
    table: Type.Array(Route, { default: [], description: 'Routes, tried in order: `{condition, pipelines}`' }),
    default_pipelines: Type.Array(Type.String(), {
      default: [],
      description: 'Pipelines of the records no route matches; when empty such records are accepted and dropped (counted in meterd_routing_unrouted_items_total)',
    }),
    match_once: Type.Boolean({ default: true, description: 'A record goes to the first matching route only; false: to every matching route (an exporter their pipelines share still gets it once)' }),
  },
  { additionalProperties: false },
)
export type Config = Static<typeof schema>

export const ROUTABLE: readonly Signal[] = ['usage', 'traces', 'logs']

function check(config: Config, ctx: CheckContext): ConfigIssue[] {
  const issues: ConfigIssue[] = []
  const fed = (pid: string): string | undefined => {
    const p = ctx.pipelines[pid]
    if (!p) return `pipeline "${pid}" is not configured under service.pipelines`
    if (!p.receivers.includes(ctx.id)) return `pipeline "${pid}" does not receive from ${ctx.id} (add ${ctx.id} to its receivers)`
    return undefined
  }
  config.table.forEach((route, i) => {
    const bad = conditionIssue(route.condition, ctx.signals, `${ctx.path}.table[${i}].condition`)
    if (bad) issues.push(bad)
    route.pipelines.forEach((pid, j) => {
      const problem = fed(pid)
      if (problem) issues.push({ path: `${ctx.path}.table[${i}].pipelines[${j}]`, message: problem })
    })
  })
  config.default_pipelines.forEach((pid, j) => {
    const problem = fed(pid)
    if (problem) issues.push({ path: `${ctx.path}.default_pipelines[${j}]`, message: problem })
  })
  return issues
}

export const routingDescriptor: Descriptor<ConnectorFactory<typeof schema>> = {
  kind: 'connector',
  type: 'routing',
  description: 'Routes each record (span, log record) to pipelines by the first matching condition of an ordered table, else to default pipelines',
  connects: ROUTABLE.map((s) => [s, s] as const),
  schema,
  check,
}
