import { StacklessError } from '../../core/errors.js'
import type { AttributeValue, Attributes } from '../../model/otlp.js'

/** A problem with one item: the decoder rejects that item and keeps the rest of the request (before admission when the key is in the body). */
export class ItemError extends StacklessError {}

/** The 64-bit integers protobufjs decodes (long.js values). */
export interface Int64 {
  low: number
  high: number
  unsigned?: boolean
  toString(): string
}

/**
 * A signed int64 as a plain value: a number while it is exact (|v| < 2^53), else its decimal
 * string (the model's rule for intValue).
 */
export function int64Value(v: Int64 | number): number | string {
  if (typeof v === 'number') return v
  const hi = v.high | 0
  if (hi > -0x200000 && hi < 0x200000) return hi * 4294967296 + (v.low >>> 0)
  return v.toString()
}

// 2^32 = 4294 * 10^6 + 967296: splitting a fixed64 into milliseconds and the nanosecond rest
// keeps every step below 2^53, so no BigInt is needed for a nanosecond timestamp.
const TWO32_MOD_1E6 = 967296
const TWO32_DIV_1E6 = 4294

/** An unsigned fixed64 (nanoseconds since the epoch) as its exact decimal string. */
export function fixed64Decimal(v: Int64 | number): string {
  if (typeof v === 'number') return String(v)
  const hi = v.high >>> 0
  const lo = v.low >>> 0
  if (hi < 0x200000) return String(hi * 4294967296 + lo)
  const t = hi * TWO32_MOD_1E6 + lo
  const rest = t % 1e6
  const ms = hi * TWO32_DIV_1E6 + (t - rest) / 1e6
  return String(ms) + String(rest).padStart(6, '0')
}

const HEX = /^[0-9a-f]*$/

/** An id's bytes as lowercase hex; '' when absent; an ItemError when its length is wrong or it is all zero. */
export function idFromBytes(bytes: Uint8Array | undefined, size: number, name: string, required: boolean): string {
  if (!bytes || bytes.length === 0) {
    if (required) throw new ItemError(`${name} is required`)
    return ''
  }
  checkIdBytes(bytes, 0, bytes.length, size, name, required)
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString('hex')
}

/** idFromBytes' checks on `buf[start, end)`, without making the hex: an ItemError when the id is bad. */
export function checkIdBytes(buf: Uint8Array, start: number, end: number, size: number, name: string, required: boolean): void {
  const fault = idFault(buf, start, end, size, name, required)
  if (fault !== undefined) throw new ItemError(fault)
}

/**
 * Why the id at `buf[start, end)` is refused, or undefined when it is good (absent is good when
 * not required). It throws nothing: the decoders check every span's ids with it first, so an
 * export of a million spans without ids costs no exception per span (docs/otlp.md, "Floods").
 */
export function idFault(buf: Uint8Array, start: number, end: number, size: number, name: string, required: boolean): string | undefined {
  const length = end - start
  if (length === 0) return required ? `${name} is required` : undefined
  if (length !== size) return `${name} must be ${size} bytes, got ${length}`
  for (let i = start; i < end; i++) if (buf[i] !== 0) return undefined
  return `${name} must not be all zero`
}

/**
 * An id in OTLP/JSON: hex as the specification says (any case), or the base64 some older
 * encoders wrote (the lengths cannot be confused).
 */
export function idFromJson(v: unknown, size: number, name: string, required: boolean): string {
  if (v === undefined || v === null || v === '') {
    if (required) throw new ItemError(`${name} is required`)
    return ''
  }
  if (typeof v !== 'string') throw new ItemError(`${name} must be a hex string`)
  let hex = v.toLowerCase()
  if (hex.length !== size * 2 || !HEX.test(hex)) {
    const bytes = v.length === Math.ceil(size / 3) * 4 ? Buffer.from(v, 'base64') : undefined
    if (!bytes || bytes.length !== size || bytes.toString('base64') !== v)
      throw new ItemError(`${name} must be ${size * 2} hex characters, got ${JSON.stringify(v.length > 80 ? v.slice(0, 80) + '…' : v)}`)
    hex = bytes.toString('hex')
  }
  if (isZero(hex)) throw new ItemError(`${name} must not be all zero`)
  return hex
}

function isZero(hex: string): boolean {
  for (let i = 0; i < hex.length; i++) if (hex.charCodeAt(i) !== 48) return false
  return true
}

/** Sets an attribute without letting a key such as `__proto__` reach the object's prototype. */
export function setAttribute(target: Attributes, key: string, value: AttributeValue): void {
  if (key === '__proto__') Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true })
  else target[key] = value
}

/** The keys already in each request's list: `includes` on the list made 30,000 resources with distinct keys cost 3.4 s. */
const keysSeen = new WeakMap<string[], Set<string>>()

/** Removes the API-key attributes from a resource's attributes, collecting distinct string keys. */
export function takeApiKeys(attributes: Attributes, names: readonly string[] | undefined, into: string[]): void {
  if (!names) return
  for (const name of names) {
    if (!Object.prototype.hasOwnProperty.call(attributes, name)) continue
    const v = attributes[name]
    delete attributes[name]
    if (typeof v !== 'string' || v === '') continue
    let seen = keysSeen.get(into)
    if (!seen) keysSeen.set(into, (seen = new Set(into)))
    if (!seen.has(v)) {
      seen.add(v)
      into.push(v)
    }
  }
}
