import { StacklessError } from '../../core/errors.js'
import type { AttributeValue, Attributes } from '../../model/otlp.js'

/** A problem with one span or log record: the connector rejects that item and keeps the rest. */
export class ItemRejected extends StacklessError {}

const own = Object.prototype.hasOwnProperty

/**
 * Reads one item's attributes (its own, and its resource's) and remembers which keys a mapping
 * consumed, so the rest can be kept on the record. Values arrive as OTLP sent them: numbers may
 * be strings ("12", "0.0"), so readers convert and reject what cannot be read.
 */
export class AttributeView {
  readonly used = new Set<string>()

  constructor(
    readonly resource: Attributes,
    readonly record: Attributes,
  ) {}

  /** The record's value for a key, else the resource's (usage data lives on the record). */
  value(key: string): AttributeValue | undefined {
    const v = own.call(this.record, key) ? this.record[key] : own.call(this.resource, key) ? this.resource[key] : undefined
    if (v === undefined || v === null || v === '') return undefined
    this.used.add(key)
    return v
  }

  /** A key's value at one level (the resource's or the record's attributes), for attribution. */
  attribution(key: string, level: Attributes): AttributeValue | undefined {
    if (!own.call(level, key)) return undefined
    const v = level[key]
    if (v === undefined || v === null || v === '') return undefined
    this.used.add(key)
    return v
  }

  has(...keys: string[]): boolean {
    return this.hasAny(keys)
  }

  /** has() of a list (no array made per call for a constant list). */
  hasAny(keys: readonly string[]): boolean {
    for (const k of keys) {
      const v = own.call(this.record, k) ? this.record[k] : own.call(this.resource, k) ? this.resource[k] : undefined
      if (v !== undefined && v !== null && v !== '') return true
    }
    return false
  }

  /**
   * A name that decides whether an item is usage at all (an operation, an event name): a string,
   * else undefined. Never rejects: an odd value on an item that is not usage must not refuse it.
   */
  name(key: string): string | undefined {
    const v = own.call(this.record, key) ? this.record[key] : own.call(this.resource, key) ? this.resource[key] : undefined
    if (typeof v !== 'string' || v === '') return undefined
    this.used.add(key)
    return v
  }

  /** The first key present, as text (numbers and booleans are written out). */
  string(...keys: string[]): string | undefined {
    return this.stringOf(keys)
  }

  /** string() of a list. */
  stringOf(keys: readonly string[]): string | undefined {
    for (const k of keys) {
      const v = this.value(k)
      if (v === undefined) continue
      if (typeof v === 'string') return v
      if (typeof v === 'number' || typeof v === 'boolean') return String(v)
      // An array (gen_ai.response.finish_reasons) gives its first element.
      if (Array.isArray(v) && (typeof v[0] === 'string' || typeof v[0] === 'number')) return String(v[0])
      throw new ItemRejected(`${k} must be a string`)
    }
    return undefined
  }

  /** A token count: a non-negative integer, as a number or a numeric string. */
  count(...keys: string[]): number | undefined {
    return this.countOf(keys)
  }

  /** count() of a list. */
  countOf(keys: readonly string[]): number | undefined {
    for (const k of keys) {
      const v = this.value(k)
      if (v === undefined) continue
      const n = typeof v === 'number' ? v : typeof v === 'string' && v.trim() !== '' ? Number(v) : NaN
      if (!Number.isSafeInteger(n) || n < 0) throw new ItemRejected(`${k} must be a non-negative integer, got ${JSON.stringify(v)}`)
      return n
    }
    return undefined
  }

  /** A non-negative number (a cost, a duration), as a number or a numeric string. */
  amount(...keys: string[]): number | undefined {
    for (const k of keys) {
      const v = this.value(k)
      if (v === undefined) continue
      const n = typeof v === 'number' ? v : typeof v === 'string' && v.trim() !== '' ? Number(v) : NaN
      if (!Number.isFinite(n) || n < 0) throw new ItemRejected(`${k} must be a non-negative number, got ${JSON.stringify(v)}`)
      return n
    }
    return undefined
  }

  /** A boolean, as true/false or the strings "true"/"false". */
  bool(...keys: string[]): boolean | undefined {
    for (const k of keys) {
      const v = this.value(k)
      if (v === undefined) continue
      if (typeof v === 'boolean') return v
      if (v === 'true' || v === 'false') return v === 'true'
      throw new ItemRejected(`${k} must be true or false, got ${JSON.stringify(v)}`)
    }
    return undefined
  }

  /** Marks keys as mapped (read by another convention on the same span) so they are not kept twice. */
  consume(keys: readonly string[]): void {
    for (const k of keys) this.used.add(k)
  }
}
