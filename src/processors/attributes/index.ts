import { hash } from 'node:crypto'
import { Type, type Static } from '@sinclair/typebox'
import type { CheckContext, CreateSettings, ProcessorFactory } from '../../host/component.js'
import type { ConfigIssue } from '../../core/config/schema.js'
import type { Batch, Consumer, Signal } from '../../core/consumer.js'
import { FIELD_CATALOGS, type Field, type FieldCatalog } from '../../domain/conditions/index.js'

const ACTIONS = ['set', 'insert', 'update', 'rename', 'delete', 'hash', 'truncate'] as const
type ActionName = (typeof ACTIONS)[number]

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
type Config = Static<typeof schema>
type ActionConfig = Config['actions'][number]

/** A writable field of the catalog, or why the key cannot be changed. */
function writable(catalog: FieldCatalog, key: string): Field | string {
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

// crypto.hash: the one-shot digest, without a Hash object per value.
const sha256 = (v: unknown): string => hash('sha256', typeof v === 'string' ? v : JSON.stringify(v), 'hex')

/**
 * The first `n` code points of `s`: a cut that never splits a surrogate pair (a lone surrogate
 * counts as one, as in Array.from), without an array of every character.
 */
export function firstCodePoints(s: string, n: number): string {
  let end = 0
  for (let k = 0; k < n && end < s.length; k++) {
    const c = s.charCodeAt(end)
    end += c >= 0xd800 && c <= 0xdbff && end + 1 < s.length && (s.charCodeAt(end + 1) & 0xfc00) === 0xdc00 ? 2 : 1
  }
  return end === s.length ? s : s.slice(0, end)
}

/** An action bound to its field(s): changes one item in place. */
function compileAction(a: ActionConfig, catalog: FieldCatalog): (item: unknown) => void {
  const f = writable(catalog, a.key) as Field
  const { get } = f
  const set = f.set!
  const remove = f.remove!
  const name: ActionName = a.action
  switch (name) {
    case 'set':
      return (item) => set(item, a.value)
    case 'insert':
      return (item) => void (get(item) === undefined && set(item, a.value))
    case 'update':
      return (item) => void (get(item) !== undefined && set(item, a.value))
    case 'delete':
      return (item) => remove(item)
    case 'hash':
      return (item) => {
        const v = get(item)
        if (v !== undefined) set(item, sha256(v))
      }
    case 'truncate': {
      const n = a.length!
      return (item) => {
        const v = get(item)
        if (typeof v === 'string' && v.length > n) set(item, firstCodePoints(v, n))
      }
    }
    case 'rename': {
      const to = writable(catalog, a.to!) as Field
      return (item) => {
        const v = get(item)
        if (v === undefined) return
        remove(item)
        to.set!(item, v)
      }
    }
  }
}

/**
 * Changes fields of every record, after the Collector's attributes processor: drop the prompt
 * text that prompt-capturing clients send, hash a subscriber's e-mail, tag a region. A change to
 * an attribution dimension (region, subscriber.email, …) changes both the record's body (what
 * the store and webhooks show) and its normalised dimension (what analytics groups by).
 */
export class AttributesProcessor implements Consumer<unknown> {
  private readonly actions: ((item: unknown) => void)[]

  constructor(private readonly settings: CreateSettings, config: Config, signal: Signal, private readonly next: Consumer<unknown>) {
    this.actions = config.actions.map((a) => compileAction(a, FIELD_CATALOGS[signal]!))
  }

  async start(): Promise<void> {}
  async shutdown(): Promise<void> {}

  async consume(batch: Batch<unknown>): Promise<void> {
    const { actions } = this
    for (const item of batch.items) for (let k = 0; k < actions.length; k++) actions[k](item)
    this.settings.metrics.accepted(batch.items.length)
    return this.next.consume(batch)
  }
}

export const attributesFactory: ProcessorFactory<typeof schema> = {
  kind: 'processor',
  type: 'attributes',
  description: 'Sets, inserts, updates, renames, deletes, hashes (SHA-256) or truncates fields of every record',
  signals: ['usage', 'traces', 'logs'],
  mutatesData: true,
  schema,
  check,
  create: (settings, config, signal, next) => new AttributesProcessor(settings, config, signal, next),
}
