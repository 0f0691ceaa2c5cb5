/**
 * The receiving side of meterd's webhooks (SPEC Events → Receiver rules), for customers'
 * Node servers: verify a delivery from its raw body bytes and headers before any side
 * effect, then deduplicate by event id. No dependency beyond node:crypto.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto'

export const DEFAULT_TOLERANCE_SECONDS = 300

export type HeaderBag =
  | Record<string, string | string[] | undefined>
  | { get(name: string): string | null }

export interface VerifyOptions {
  /** The deployed secret(s): hold both during a rotation overlap, drop the previous after it. */
  secrets: string | readonly string[]
  /** Allowed clock difference in either direction (default 300 s). */
  toleranceSeconds?: number
  /** Receiver clock, ms since epoch (default Date.now()). */
  now?: number
  /** The vendor word in the header names (default `Service`). */
  vendorWord?: string
}

export type VerifyFailure =
  | 'missing_signature'
  | 'missing_timestamp'
  | 'bad_timestamp'
  | 'timestamp_too_old'
  | 'timestamp_in_future'
  | 'bad_signature_format'
  | 'signature_mismatch'
  | 'no_secret'

export type VerifyResult =
  | { ok: true; timestamp: number; eventId?: string }
  | { ok: false; reason: VerifyFailure; message: string }

function header(headers: HeaderBag, name: string): string | undefined {
  if (typeof (headers as { get?: unknown }).get === 'function') {
    return (headers as { get(n: string): string | null }).get(name) ?? undefined
  }
  const bag = headers as Record<string, string | string[] | undefined>
  let v = bag[name.toLowerCase()]
  if (v === undefined) {
    for (const k of Object.keys(bag)) if (k.toLowerCase() === name.toLowerCase()) v = bag[k]
  }
  return Array.isArray(v) ? v.join(', ') : v
}

const fail = (reason: VerifyFailure, message: string): VerifyResult => ({ ok: false, reason, message })

/**
 * Verifies one delivery. `rawBody` must be the bytes as received — never a re-serialised
 * JSON object. Accepts when any `sha256=` value of the signature header matches any
 * secret (compared in constant time) and the timestamp is within the tolerance.
 */
export function verifyWebhook(rawBody: Buffer | Uint8Array | string, headers: HeaderBag, opts: VerifyOptions): VerifyResult {
  const word = opts.vendorWord ?? 'Service'
  const secrets = (typeof opts.secrets === 'string' ? [opts.secrets] : [...opts.secrets]).filter((s) => s.length > 0)
  if (secrets.length === 0) return fail('no_secret', 'no signing secret was given')
  const sigHeader = header(headers, `X-${word}-Signature-256`)
  if (!sigHeader) return fail('missing_signature', `the X-${word}-Signature-256 header is missing`)
  const tsHeader = header(headers, `X-${word}-Webhook-Timestamp`)
  if (!tsHeader) return fail('missing_timestamp', `the X-${word}-Webhook-Timestamp header is missing`)
  if (!/^\d{1,12}$/.test(tsHeader.trim())) return fail('bad_timestamp', 'the timestamp is not epoch seconds')
  const ts = Number(tsHeader.trim())
  const tolerance = opts.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS
  const nowS = Math.floor((opts.now ?? Date.now()) / 1000)
  if (ts < nowS - tolerance) return fail('timestamp_too_old', `the timestamp is more than ${tolerance} s old`)
  if (ts > nowS + tolerance) return fail('timestamp_in_future', `the timestamp is more than ${tolerance} s ahead`)

  const given: Buffer[] = []
  for (const part of sigHeader.split(',')) {
    const m = /^\s*sha256=([0-9a-fA-F]{64})\s*$/.exec(part)
    if (m) given.push(Buffer.from(m[1].toLowerCase(), 'hex'))
  }
  if (given.length === 0) return fail('bad_signature_format', 'no sha256=<hex> value in the signature header')

  const body = typeof rawBody === 'string' ? Buffer.from(rawBody, 'utf8') : rawBody
  let match = false
  // Every secret against every signature, without an early exit, so timing says nothing about which matched.
  for (const secret of secrets) {
    const expected = createHmac('sha256', secret).update(tsHeader.trim()).update('.').update(body).digest()
    for (const g of given) if (timingSafeEqual(expected, g)) match = true
  }
  if (!match) return fail('signature_mismatch', 'no signature matches the secret(s)')
  return { ok: true, timestamp: ts, eventId: header(headers, `X-${word}-Webhook-Id`) }
}

/**
 * Remembers which deliveries were already handled: retries can deliver an event twice;
 * the signature proves authenticity, not uniqueness. Keyed by the event id, or by
 * timestamp + body hash when no id is known. Entries expire after `ttlMs`; at most
 * `maxEntries` are kept (oldest dropped first). In-memory: use your own store to share it.
 */
export class WebhookDeduplicator {
  private readonly seen = new Map<string, number>()

  constructor(private readonly opts: { ttlMs?: number; maxEntries?: number } = {}) {}

  /** The dedup key of a delivery: its event id, else `timestamp:sha256(body)`. */
  static keyOf(opts: { eventId?: string; timestamp?: string | number; rawBody?: Buffer | Uint8Array | string }): string {
    if (opts.eventId) return `id:${opts.eventId}`
    const hash = createHash('sha256').update(opts.rawBody ?? '').digest('hex')
    return `tb:${opts.timestamp ?? ''}:${hash}`
  }

  /** True the first time a key is seen (within the TTL), false for a duplicate. */
  firstSeen(key: string, now = Date.now()): boolean {
    const ttl = this.opts.ttlMs ?? 24 * 3_600_000
    const at = this.seen.get(key)
    if (at !== undefined && now - at < ttl) return false
    this.seen.delete(key)
    this.seen.set(key, now)
    const max = this.opts.maxEntries ?? 100_000
    while (this.seen.size > max) this.seen.delete(this.seen.keys().next().value as string)
    return true
  }

  get size(): number {
    return this.seen.size
  }
}
