import type { AttributeValue } from '../../model/otlp.js'
import { ItemRejected, type AttributeView } from './view.js'

/** `<prefix><name>` attributes → REST body fields (wire-contract §4.2). */
const TEXT: readonly [name: string, field: string][] = [
  ['organization.name', 'organizationName'],
  ['product.name', 'productName'],
  ['subscription.id', 'subscriptionId'],
  ['agent.name', 'agent'],
  ['task.type', 'taskType'],
  ['trace.type', 'traceType'],
  ['trace.name', 'traceName'],
  ['transaction.name', 'transactionName'],
  ['job.id', 'agenticJobId'],
  ['job.name', 'agenticJobName'],
  ['job.type', 'agenticJobType'],
  ['job.version', 'agenticJobVersion'],
  ['squad.id', 'squadId'],
  ['squad.name', 'squadName'],
  ['squad.role', 'squadRole'],
  ['middleware.source', 'middlewareSource'],
  ['operation.subtype', 'operationSubtype'],
  ['ticket.id', 'ticketId'],
  ['model.host', 'modelHost'],
  ['subscriber.email.source', 'subscriberEmailSource'],
  ['system.fingerprint', 'systemFingerprint'],
  ['subscription_tier', 'subscriptionTier'],
]

/** `<prefix><name>` → the subscriber object's fields. */
const SUBSCRIBER: readonly [name: string, path: 'id' | 'email' | 'credential.name' | 'credential.value'][] = [
  ['subscriber.id', 'id'],
  ['subscriber.email', 'email'],
  ['subscriber.credential.name', 'credential.name'],
  ['subscriber.credential.value', 'credential.value'],
]

/** Names read without a prefix, after the prefixed ones (resource attributes of the coding assistants, OTel semconv). */
const PLAIN_TEXT: readonly [name: string, field: string][] = [
  ['organization.name', 'organizationName'],
  ['product.name', 'productName'],
  ['deployment.environment.name', 'environment'],
  ['deployment.environment', 'environment'],
  ['cloud.region', 'region'],
]

const text = (v: AttributeValue, key: string): string => {
  if (typeof v === 'string') return v
  if (typeof v === 'number' || typeof v === 'boolean') return String(v)
  throw new ItemRejected(`${key} must be a string`)
}

/**
 * The attribution fields of a record (REST names), from the attributes with the configured
 * prefixes (default `service.` and `revenium.`), then the plain names. Resource attributes win
 * over the record's own; within one, a prefixed name wins over a plain one, and prefixes count
 * in their configured order. Claude Code's `organization.id` (Anthropic's UUID) is not read:
 * it is not the organization.
 */
export function attributionFields(v: AttributeView, prefixes: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  const subscriber: { id?: string; email?: string; credential?: { name?: string; value?: string } } = {}
  const set = (field: string, value: unknown): void => {
    if (out[field] === undefined) out[field] = value
  }
  const setSubscriber = (path: (typeof SUBSCRIBER)[number][1], value: string): void => {
    if (path === 'id' || path === 'email') subscriber[path] ??= value
    else {
      const credential = (subscriber.credential ??= {})
      const k = path === 'credential.name' ? 'name' : 'value'
      credential[k] ??= value
    }
  }
  const plan = planOf(prefixes)
  const hits: number[] = []
  for (const level of [v.resource, v.record]) {
    // The level's names that attribution reads, in the plan's order of precedence (a level holds
    // a few names; the plan has dozens).
    hits.length = 0
    for (const key in level) {
      const rank = plan.rank.get(key)
      if (rank !== undefined) hits.push(rank)
    }
    if (hits.length > 1) hits.sort((a, b) => a - b)
    for (const rank of hits) {
      const [key, kind, target] = plan.steps[rank]
      const x = v.attribution(key, level)
      if (x === undefined) continue
      if (kind === TEXT_FIELD) set(target, text(x, key))
      else if (kind === SUBSCRIBER_FIELD) setSubscriber(target as (typeof SUBSCRIBER)[number][1], text(x, key))
      else if (kind === RETRY) set('retryNumber', integer(x, key))
      else if (kind === STREAM) set('isStreamed', x === true || x === 'true')
    }
  }
  if (subscriber.id !== undefined || subscriber.email !== undefined || subscriber.credential) out.subscriber = subscriber
  return out
}

const TEXT_FIELD = 0
const SUBSCRIBER_FIELD = 1
const RETRY = 2
const STREAM = 3
type Step = readonly [key: string, kind: number, target: string]

interface Plan {
  steps: readonly Step[]
  /** A name's place in `steps`: its precedence. */
  rank: ReadonlyMap<string, number>
}

const plans = new WeakMap<readonly string[], Plan>()

/**
 * The attribute names attributionFields reads on each level, in precedence order, for a list of
 * prefixes: made once per list, so a record costs lookups only (no names built per record).
 */
function planOf(prefixes: readonly string[]): Plan {
  let plan = plans.get(prefixes)
  if (plan) return plan
  const steps: Step[] = []
  for (const p of prefixes) {
    for (const [name, field] of TEXT) steps.push([p + name, TEXT_FIELD, field])
    for (const [name, path] of SUBSCRIBER) steps.push([p + name, SUBSCRIBER_FIELD, path])
    steps.push([p + 'retry.number', RETRY, ''])
    steps.push([p + 'request.stream', STREAM, ''])
  }
  for (const [name, field] of PLAIN_TEXT) steps.push([name, TEXT_FIELD, field])
  steps.push(['user.email', SUBSCRIBER_FIELD, 'email'])
  // A name listed twice (a prefix given twice, or '') is read at its first place only, as before.
  const rank = new Map<string, number>()
  steps.forEach(([key], i) => {
    if (!rank.has(key)) rank.set(key, i)
  })
  plans.set(prefixes, (plan = { steps, rank }))
  return plan
}

function integer(v: AttributeValue, key: string): number {
  const n = typeof v === 'number' ? v : typeof v === 'string' ? Number(v) : NaN
  if (!Number.isSafeInteger(n) || n < 0) throw new ItemRejected(`${key} must be a non-negative integer`)
  return n
}

/**
 * The attributes that carry an API key sent in the body, never stored: `<prefix>api_key` for
 * each configured prefix, and always the default ones (an operator who changes the prefixes
 * must not start storing keys that clients still send under the old names).
 */
export function apiKeyNames(prefixes: readonly string[]): string[] {
  return [...new Set([...prefixes, 'service.', 'revenium.'].map((p) => p + 'api_key'))]
}

/**
 * The attributes no mapping consumed, kept on the record (resource attributes win on a name
 * both carry), without API keys and without the configured content attributes (prompts and
 * responses): a name in `drop` drops itself and every name below it.
 */
export function keptAttributes(v: AttributeView, drop: readonly string[], apiKeys: readonly string[]): Record<string, AttributeValue> | undefined {
  let out: Record<string, AttributeValue> | undefined
  for (const level of [v.resource, v.record]) {
    for (const key in level) {
      if (v.used.has(key) || apiKeys.includes(key) || dropped(key, drop)) continue
      out ??= {}
      if (Object.prototype.hasOwnProperty.call(out, key)) continue
      if (key === '__proto__') Object.defineProperty(out, key, { value: level[key], enumerable: true, writable: true, configurable: true })
      else out[key] = level[key]
    }
  }
  return out
}

function dropped(key: string, drop: readonly string[]): boolean {
  let d = drops.get(drop)
  if (!d) drops.set(drop, (d = { names: new Set(drop), seen: new Map() }))
  let out = d.seen.get(key)
  if (out !== undefined) return out
  // `key` is dropped when it, or a dotted prefix of it (`a` or `a.b` of `a.b.c`), is listed.
  out = d.names.has(key)
  for (let i = key.indexOf('.'); !out && i > 0; i = key.indexOf('.', i + 1)) out = d.names.has(key.slice(0, i))
  // Attribute names repeat from record to record; a client sending ever new ones only refills the memo.
  if (d.seen.size >= 10_000) d.seen.clear()
  d.seen.set(key, out)
  return out
}

/** Per drop list: its names, and the answer for the attribute names seen lately. */
const drops = new WeakMap<readonly string[], { names: ReadonlySet<string>; seen: Map<string, boolean> }>()

