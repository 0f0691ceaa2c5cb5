import type { TSchema } from '@sinclair/typebox'
import type { Attributes, LogItem, SpanItem } from '../../model/otlp.js'
import { CompletionSchema, MediaSchema, ToolEventSchema } from '../../model/schemas.js'
import type { Attribution, UsageRecord } from '../../model/usage-record.js'

/**
 * The fields a condition (and an attributes action) can name, per signal (docs/routing.md): how
 * each is read from an item, what type it has (so `model > 3` is a config error, not a silent
 * false), and, when it can be changed, how it is written. Resolved once, at config load.
 */

/**
 * `string`, `number` and `boolean` fields hold that JSON type; `decimal` fields hold exact decimal
 * strings (money, nanosecond times) and compare exactly; `any` fields (free-form attributes) are
 * compared by the type the value has at run time.
 */
export type FieldType = 'string' | 'number' | 'decimal' | 'boolean' | 'any'

export interface Field<T = any> {
  type: FieldType
  /** The value, or undefined when the item has none (absent, null, or an empty attribution dimension). */
  get(item: T): unknown
  /** Compare in lower case (provider, DESIGN §3). */
  lower?: boolean
  /** Writable fields: set a value, or remove it. */
  set?(item: T, value: unknown): void
  remove?(item: T): void
}

export interface FieldCatalog<T = any> {
  /** The field at `path`, or why there is none. */
  resolve(path: string): Field<T> | { error: string }
}

// ---------------------------------------------------------------- paths into plain objects

type Obj = Record<string, unknown>
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v)

/**
 * The value at `parts` below `obj`. A key may itself hold dots (OTLP attribute keys such as
 * `gen_ai.request.model`): at each level the longest key present wins.
 */
export function readPath(obj: unknown, parts: readonly string[]): unknown {
  return pathReader(parts)(obj)
}

/** readPath for one path, with every dotted key it may try joined once, up front. */
export function pathReader(parts: readonly string[]): (obj: unknown) => unknown {
  if (parts.length === 1) {
    const key = parts[0]
    return (obj) => (isObj(obj) && Object.hasOwn(obj, key) ? obj[key] : undefined)
  }
  // keys[from][end] = parts[from..end) joined with dots.
  const keys = parts.map((_, from) => parts.map((_, end) => (end >= from ? parts.slice(from, end + 1).join('.') : '')))
  const n = parts.length
  const read = (obj: unknown, from: number): unknown => {
    if (from === n) return obj
    if (!isObj(obj)) return undefined
    for (let end = n - 1; end >= from; end--) {
      const key = keys[from][end]
      if (Object.hasOwn(obj, key)) {
        const v = read(obj[key], end + 1)
        if (v !== undefined) return v
      }
    }
    return undefined
  }
  return (obj) => read(obj, 0)
}

function writePath(obj: Obj, parts: readonly string[], value: unknown): void {
  let o = obj
  for (let i = 0; i < parts.length - 1; i++) {
    const next = o[parts[i]]
    o = isObj(next) ? next : (put(o, parts[i], {}) as Obj)
  }
  put(o, parts[parts.length - 1], value)
}

/**
 * Sets `o[key]` and returns the value. V8 adds a property by assignment with a computed key
 * (`o[key] = v`, and Reflect.set, Object.assign) as a "keyed" store, and turns the object into a
 * slow dictionary when it already holds more than a dozen properties outside the object itself —
 * as every copy made by withoutKey() does (an object JSON.parse made holds its properties inside
 * itself, and stays fast). A record body in dictionary mode costs every later reader: the store's
 * encoding of one took three times as long (test/bench/routing.bench.js). So a key is added to
 * such a copy by definition, a named store, which keeps the object fast up to 128 properties;
 * to any other object by assignment, which costs a tenth of a definition.
 */
function put(o: Obj, key: string, value: unknown): unknown {
  if (!COPIES.has(o) || Object.hasOwn(o, key)) o[key] = value
  else {
    NEW_PROPERTY.value = value
    Object.defineProperty(o, key, NEW_PROPERTY)
    NEW_PROPERTY.value = undefined
  }
  return value
}

/** The objects withoutKey() made (see put). */
const COPIES = new WeakSet<object>()

/** The descriptor of put()'s new properties (reused: defineProperty reads it and keeps nothing). */
const NEW_PROPERTY: PropertyDescriptor = { value: undefined, writable: true, enumerable: true, configurable: true }

/**
 * `obj` without the value at `parts`. The object that held the key is copied without it rather
 * than changed with `delete`, which turns an object into a slow dictionary that every later
 * read, spread and encoding pays for; the objects above it get the copy in place of the
 * original. The one exception is the object's newest key (its last, as a client's JSON listed
 * it): V8 deletes that one by undoing the step that added it, and the object stays fast with no
 * copy. Returns `obj` itself when there was nothing to remove, when that key was deleted in
 * place, or when only a nested object changed. Only for objects no other item holds.
 */
function withoutPath(obj: Obj, parts: readonly string[], i = 0): Obj {
  const key = parts[i]
  if (!Object.hasOwn(obj, key)) return obj
  if (i === parts.length - 1) {
    const keys = Object.keys(obj)
    if (keys[keys.length - 1] !== key) return withoutKey(obj, key)
    delete obj[key]
    return obj
  }
  const child = obj[key]
  if (!isObj(child)) return obj
  const next = withoutPath(child, parts, i + 1)
  if (next !== child) obj[key] = next
  return obj
}

function withoutKey(obj: Obj, key: string): Obj {
  // Object rest: V8 copies in one step (a loop of assignments is ten times slower, delete five).
  const { [key]: _removed, ...rest } = obj
  COPIES.add(rest)
  return rest
}

const present = (v: unknown): unknown => (v === null ? undefined : v)

/** Where a field's object lives in an item: read it, and put a replacement (or a new one) there. */
interface Container<T> {
  get(item: T): Obj | undefined
  put(item: T, obj: Obj): void
  /** Other items hold the same object: never change it, put a changed copy. */
  shared?: boolean
}

/** A field of a plain object inside the item, at a nested path. */
function objectField<T>(type: FieldType, container: Container<T>, parts: readonly string[]): Field<T> {
  const read = pathReader(parts)
  return {
    type,
    get: (item) => present(read(container.get(item))),
    set: (item, v) => {
      let c = container.get(item)
      if (!c) container.put(item, (c = {}))
      writePath(c, parts, v)
    },
    remove: (item) => {
      const c = container.get(item)
      if (!c) return
      const next = withoutPath(c, parts)
      if (next !== c) container.put(item, next)
    },
  }
}

/** A flat map whose keys hold dots (OTLP attributes): `attributes.gen_ai.request.model` is one key. */
function flatKeyField<T>(container: Container<T>, key: string): Field<T> {
  const read = pathReader(key.split('.'))
  return {
    type: 'any',
    get: (item) => present(read(container.get(item))),
    set: (item, v) => {
      const c = container.get(item)
      if (c && !container.shared) put(c, key, v)
      else container.put(item, { ...c, [key]: v })
    },
    remove: (item) => {
      const c = container.get(item)
      if (c && Object.hasOwn(c, key)) container.put(item, withoutKey(c, key))
    },
  }
}

const readOnly = <T>(type: FieldType, get: (item: T) => unknown, extra: Partial<Field<T>> = {}): Field<T> => ({ type, get, ...extra })

// ---------------------------------------------------------------- usage records

/** Body fields that are attribution dimensions: reading takes the normalised value; writing keeps both in step. */
const DIMENSIONS: Record<string, keyof Attribution> = {
  organizationName: 'organizationName',
  productName: 'productName',
  agent: 'agent',
  environment: 'environment',
  region: 'region',
  traceId: 'traceId',
  workflowId: 'workflowId',
  taskType: 'taskType',
  subscriptionId: 'subscriptionId',
  ticketId: 'ticketId',
  'subscriber.id': 'subscriberId',
  'subscriber.email': 'subscriberEmail',
  'subscriber.credential.name': 'subscriberCredentialName',
}

/** What meterd derives beside the body: readable, never written by an action. */
const META: Record<string, Field<UsageRecord>> = {
  kind: readOnly('string', (r) => r.kind),
  id: readOnly('string', (r) => r.id),
  team: readOnly('string', (r) => r.caller.team || undefined),
  account: readOnly('string', (r) => r.caller.account || undefined),
  tenant: readOnly('string', (r) => r.caller.tenant || undefined),
  attributed: readOnly('boolean', (r) => r.attributed),
  eventTime: readOnly('string', (r) => r.eventTime),
  receivedAt: readOnly('string', (r) => r.receivedAt),
  'cost.total': readOnly('decimal', (r) => r.cost?.total),
  'cost.source': readOnly('string', (r) => r.cost?.source),
  'cost.currency': readOnly('string', (r) => r.cost?.currency),
  'cost.priceVersion': readOnly('string', (r) => r.cost?.priceVersion),
  'cost.note': readOnly('string', (r) => r.cost?.note),
}

/** The JSON type a published-schema property holds. */
function schemaType(s: TSchema): FieldType | 'object' {
  if (Array.isArray(s.anyOf)) {
    const member = (s.anyOf as TSchema[]).find((m) => m.type !== 'null')
    return member ? schemaType(member) : 'any'
  }
  if (s.const !== undefined) return typeof s.const === 'string' ? 'string' : typeof s.const === 'number' ? 'number' : 'any'
  switch (s.type) {
    case 'string':
      return 'string'
    case 'integer':
    case 'number':
      return 'number'
    case 'boolean':
      return 'boolean'
    case 'object':
      return 'object'
    default:
      return 'any'
  }
}

/** Every field of the published record schemas (completion, tool event, media), by name. */
const BODY_TYPES: Map<string, FieldType | 'object'> = (() => {
  const m = new Map<string, FieldType | 'object'>()
  for (const schema of [CompletionSchema, ToolEventSchema, MediaSchema])
    for (const [name, prop] of Object.entries(schema.properties as Record<string, TSchema>)) if (!m.has(name)) m.set(name, schemaType(prop))
  return m
})()

const bodyOf: Container<UsageRecord> = { get: (r) => r.body as Obj, put: (r, body) => void (r.body = body as never) }

function dimensionField(path: string, dim: keyof Attribution): Field<UsageRecord> {
  const parts = path.split('.')
  const inBody = objectField<UsageRecord>('string', bodyOf, parts)
  return {
    type: 'string',
    // The attribution processor's normalised value (the key's environment when the body has none); before it runs, the body's.
    get: (r) => {
      const a = r.attribution[dim]
      if (a) return a
      const v = inBody.get(r)
      return v === '' ? undefined : v
    },
    set: (r, v) => {
      inBody.set!(r, v)
      const text = typeof v === 'string' ? v.trim() : String(v)
      r.attribution[dim] = dim === 'subscriberEmail' ? text.toLowerCase() : text
      if (dim === 'organizationName' || dim === 'productName') r.attributed = r.attribution.organizationName !== '' && r.attribution.productName !== ''
    },
    remove: (r) => {
      inBody.remove!(r)
      r.attribution[dim] = ''
      if (dim === 'organizationName' || dim === 'productName') r.attributed = false
    },
  }
}

const USAGE_HELP = 'a record field (kind, team, organizationName, productName, provider, model, agent, environment, cost.total, inputTokenCount, …), attributes.<key>, usageMetadata.<key> or body.<path>'

const usageFieldsUnguarded: FieldCatalog<UsageRecord> = {
  resolve(path) {
    if (path in META) return META[path]
    if (path in DIMENSIONS) return dimensionField(path, DIMENSIONS[path])
    const parts = path.split('.')
    if (parts[0] === 'cost') {
      if (parts[1] === 'parts' && parts.length === 3) return readOnly('decimal', (r) => r.cost?.parts[parts[2]])
      return { error: `unknown field "${path}" (cost fields: cost.total, cost.source, cost.currency, cost.priceVersion, cost.note, cost.parts.<name>)` }
    }
    // body.<path>: any field of the client's body, as sent, untyped.
    if (parts[0] === 'body') {
      if (parts.length === 1) return { error: 'name a field below body, e.g. body.customField' }
      return objectField('any', bodyOf, parts.slice(1))
    }
    const type = BODY_TYPES.get(parts[0])
    if (type === undefined) return { error: `unknown field "${path}": expected ${USAGE_HELP}` }
    if (type === 'object') return parts.length === 1 ? { error: `${path} is an object: name a key below it, e.g. ${path}.name` } : objectField('any', bodyOf, parts)
    if (parts.length > 1) return { error: `${parts[0]} is a ${type}, it has no field "${parts.slice(1).join('.')}"` }
    const f = objectField<UsageRecord>(type, bodyOf, parts)
    if (path === 'provider') return { ...f, lower: true, get: (r) => (typeof r.body.provider === 'string' ? r.body.provider.toLowerCase() : undefined) }
    return f
  },
}

// ---------------------------------------------------------------- spans and log records

const RESOURCE_OR_ATTRIBUTES = 'attributes.<key>, resource.<key>'

/**
 * An item's resource is shared by the other items of its resource in the request, which may go
 * to other pipelines: a change replaces this item's resource instead of changing the shared one.
 */
const resourceOf: Container<SpanItem | LogItem> = {
  get: (i) => i.resource.attributes as Obj,
  put: (i, attributes) => void (i.resource = { ...i.resource, attributes: attributes as Attributes }),
  shared: true,
}

function otlpCommon<T extends SpanItem | LogItem>(path: string, own: Container<T>): Field<T> | undefined {
  if (path.startsWith('attributes.')) return flatKeyField<T>(own, path.slice('attributes.'.length))
  if (path.startsWith('resource.')) return flatKeyField<T>(resourceOf, path.slice('resource.'.length))
  if (path === 'scope.name') return readOnly('string', (i) => i.scope.name || undefined)
  if (path === 'scope.version') return readOnly('string', (i) => i.scope.version || undefined)
  return undefined
}

const SPAN: Record<string, Field<SpanItem>> = {
  name: readOnly('string', (i) => i.span.name),
  kind: readOnly('number', (i) => i.span.kind),
  traceId: readOnly('string', (i) => i.span.traceId || undefined),
  spanId: readOnly('string', (i) => i.span.spanId || undefined),
  parentSpanId: readOnly('string', (i) => i.span.parentSpanId || undefined),
  startTimeUnixNano: readOnly('decimal', (i) => i.span.startTimeUnixNano),
  endTimeUnixNano: readOnly('decimal', (i) => i.span.endTimeUnixNano),
  'status.code': readOnly('number', (i) => i.span.status.code),
  'status.message': readOnly('string', (i) => i.span.status.message || undefined),
}

const spanFieldsUnguarded: FieldCatalog<SpanItem> = {
  resolve(path) {
    return SPAN[path] ?? otlpCommon<SpanItem>(path, { get: (i) => i.span.attributes as Obj, put: (i, a) => void (i.span.attributes = a as Attributes) }) ?? { error: `unknown span field "${path}": expected ${Object.keys(SPAN).join(', ')}, scope.name, scope.version, ${RESOURCE_OR_ATTRIBUTES}` }
  },
}

const LOG: Record<string, Field<LogItem>> = {
  severityNumber: readOnly('number', (i) => i.log.severityNumber),
  severityText: readOnly('string', (i) => i.log.severityText || undefined),
  eventName: readOnly('string', (i) => i.log.eventName || undefined),
  body: readOnly('any', (i) => present(i.log.body)),
  traceId: readOnly('string', (i) => i.log.traceId || undefined),
  spanId: readOnly('string', (i) => i.log.spanId || undefined),
  timeUnixNano: readOnly('decimal', (i) => i.log.timeUnixNano),
  observedTimeUnixNano: readOnly('decimal', (i) => i.log.observedTimeUnixNano),
}

const logFieldsUnguarded: FieldCatalog<LogItem> = {
  resolve(path) {
    return LOG[path] ?? otlpCommon<LogItem>(path, { get: (i) => i.log.attributes as Obj, put: (i, a) => void (i.log.attributes = a as Attributes) }) ?? { error: `unknown log field "${path}": expected ${Object.keys(LOG).join(', ')}, scope.name, scope.version, ${RESOURCE_OR_ATTRIBUTES}` }
  },
}

/** Names that would reach an object's prototype instead of its data. */
const FORBIDDEN = new Set(['__proto__', 'constructor', 'prototype'])

function guarded<T>(c: FieldCatalog<T>): FieldCatalog<T> {
  return {
    resolve: (path) => (path.split('.').some((p) => FORBIDDEN.has(p)) ? { error: `"${path}" is not a field name` } : c.resolve(path)),
  }
}

export const usageFields = guarded(usageFieldsUnguarded)
export const spanFields = guarded(spanFieldsUnguarded)
export const logFields = guarded(logFieldsUnguarded)

/** The catalog of each signal whose items conditions can read. */
export const FIELD_CATALOGS: Partial<Record<string, FieldCatalog>> = { usage: usageFields, traces: spanFields, logs: logFields }
