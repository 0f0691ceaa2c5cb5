import { hash } from 'node:crypto'
import type { CreateSettings, ProcessorFactory } from '../../host/component.js'
import type { Batch, Consumer, Signal } from '../../core/consumer.js'
import { FIELD_CATALOGS, type Field, type FieldCatalog } from '../../domain/conditions/index.js'
import { attributesDescriptor, writable, type ActionConfig, type ActionName, type Config } from './descriptor.js'

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

export const attributesFactory: ProcessorFactory<typeof attributesDescriptor.schema> = {
  ...attributesDescriptor,
  create: (settings, config, signal, next) => new AttributesProcessor(settings, config, signal, next),
}
