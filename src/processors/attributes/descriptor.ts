// The attributes processor as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type, type Static } from '@sinclair/typebox'
import type { CheckContext, Descriptor, ProcessorFactory } from '../../host/component.js'
import type { ConfigIssue } from '../../core/config/schema.js'
import { FIELD_CATALOGS, type Field, type FieldCatalog } from '../../domain/conditions/index.js'

const ACTIONS = ['set', 'insert', 'update', 'rename', 'delete', 'hash', 'truncate'] as const

export type ActionName = (typeof ACTIONS)[number]

const Action = Type.Object(
  {
    key: Type.String({ minLength: 1, description: 'The field, as conditions name it: `region`, `subscriber.email`, `attributes.tier`, `body.customField`' }),
    action: Type.Union(ACTIONS.map((a) => Type.Literal(a)), {
      description: 'set (always), insert (only when absent), update (only when present), rename (to `to`), delete, hash (SHA-256, lowercase hex), truncate (to `length` characters)',
    }),
    value: Type.Optional(Type.Union([Type.String(), Type.Number(), Type.Boolean()], { description: 'The value of set, insert and update' })),
    to: Type.Optional(Type.String({ minLength: 1, description: 'The new field name of rename' })),
    length: Type.Optional(Type.Integer({ minimum: 0, description: 'The most characters truncate keeps' })),
  },
  { additionalProperties: false },
)

const schema = Type.Object(
  { actions: Type.Array(Action, { minItems: 1, description: 'Actions, applied in order to every record', examples: [[{ key: 'region', value: 'eu-west-1', action: 'insert' }]] }) },
  { additionalProperties: false },
)
export type Config = Static<typeof schema>

export type ActionConfig = Config['actions'][number]

/** A writable field of the catalog, or why the key cannot be changed. */
export function writable(catalog: FieldCatalog, key: string): Field | string {
  const f = catalog.resolve(key)
  if ('error' in f) return f.error
  if (!f.set || !f.remove) return `${key} is derived by meterd and cannot be changed`
  return f
}

const jsonType = (v: unknown): string => (typeof v === 'number' ? 'number' : typeof v === 'boolean' ? 'boolean' : 'string')

/** Why an action cannot apply to items of this catalog; undefined when it can. */
function actionProblem(a: ActionConfig, catalog: FieldCatalog): { field: 'key' | 'value' | 'to' | 'length' | 'action'; message: string } | undefined {
  const f = writable(catalog, a.key)
  if (typeof f === 'string') return { field: 'key', message: f }
  switch (a.action) {
    case 'set':
    case 'insert':
    case 'update':
      if (a.value === undefined) return { field: 'value', message: `${a.action} needs a value` }
      if (f.type !== 'any' && f.type !== jsonType(a.value)) return { field: 'value', message: `${a.key} is a ${f.type}, not a ${jsonType(a.value)}` }
      return undefined
    case 'rename': {
      if (a.to === undefined) return { field: 'to', message: 'rename needs `to`, the new field name' }
      const to = writable(catalog, a.to)
      if (typeof to === 'string') return { field: 'to', message: to }
      if (to.type !== 'any' && to.type !== f.type) return { field: 'to', message: `${a.to} is a ${to.type}, ${a.key} a ${f.type}` }
      return undefined
    }
    case 'hash':
    case 'truncate':
      if (f.type !== 'string' && f.type !== 'any') return { field: 'key', message: `${a.key} is a ${f.type}: ${a.action} applies to strings` }
      if (a.action === 'truncate' && a.length === undefined) return { field: 'length', message: 'truncate needs `length`' }
      return undefined
    case 'delete':
      return undefined
  }
}

function check(config: Config, ctx: CheckContext): ConfigIssue[] {
  const issues: ConfigIssue[] = []
  const signals = ctx.signals.length ? ctx.signals : ['usage']
  config.actions.forEach((a, i) => {
    for (const s of signals) {
      const catalog = FIELD_CATALOGS[s]
      const p = catalog ? actionProblem(a, catalog) : { field: 'action' as const, message: `attributes cannot change ${s} items` }
      if (p) {
        issues.push({ path: `${ctx.path}.actions[${i}].${p.field}`, message: p.message })
        break
      }
    }
  })
  return issues
}

export const attributesDescriptor: Descriptor<ProcessorFactory<typeof schema>> = {
  kind: 'processor',
  type: 'attributes',
  description: 'Sets, inserts, updates, renames, deletes, hashes (SHA-256) or truncates fields of every record',
  signals: ['usage', 'traces', 'logs'],
  mutatesData: true,
  schema,
  check,
}
