import type { Dispatcher } from 'undici'
import type { UsageKind } from '../../model/usage-record.js'

/** Where each kind is posted, on the upstream's base URL: the REST metering contract. */
export const PATHS: Record<UsageKind, string> = {
  completion: '/meter/v2/ai/completions',
  tool: '/meter/v2/tool/events',
  image: '/meter/v2/ai/images',
  audio: '/meter/v2/ai/audio',
  video: '/meter/v2/ai/video',
}

export type SendOutcome =
  /** The upstream stored (or already had) every record. */
  | { kind: 'acked'; status: number }
  /** The upstream refuses the data for good; `index` is the refused record of a batch when it names one. */
  | { kind: 'refused'; status: number; error: string; index?: number }
  /**
   * The upstream takes fewer records per request than this batch held (413 `batch_too_large`):
   * the records are not refused, the batch is. `limit` is the upstream's max_batch_items when it says.
   */
  | { kind: 'batch_too_large'; status: number; error: string; limit?: number }
  /** Try again later, after `afterMs` when the upstream said so (Retry-After). */
  | { kind: 'retry'; status?: number; error: string; afterMs?: number }

export interface SenderOptions {
  endpoint: string
  apiKey: string
  timeoutMs: number
  /** Upper bound on an upstream's Retry-After. */
  maxRetryAfterMs: number
}

/**
 * The endpoint without a trailing `/`, `/meter/v2`, `/meter` or `/v2` (the SDKs' base-URL forms,
 * wire-contract §2.3), so the paths are appended to it: a gateway behind a proxy's path prefix
 * keeps its prefix.
 */
export function baseOf(endpoint: string): string {
  const u = new URL(endpoint)
  return u.origin + u.pathname.replace(/\/+$/, '').replace(/(\/meter\/v2|\/meter|\/v2)$/, '')
}

/** Why `endpoint` cannot be the upstream's base URL, or undefined when it can. */
export function endpointIssue(endpoint: string): string | undefined {
  let u: URL
  try {
    u = new URL(endpoint)
  } catch {
    return `"${endpoint}" is not a valid URL`
  }
  if (u.username || u.password) return 'must not hold credentials (the key is api_key)'
  if (u.search || u.hash) return 'must not hold a query or a fragment (the paths are appended to it)'
  return undefined
}

/** Statuses that say the records themselves can never be accepted. */
const REFUSED = new Set([400, 413, 415, 422])

/**
 * One request to the upstream: the records of one kind as a JSON array (a single record as an
 * object), with the exporter's key, classified the way the Collector's exporterhelper does —
 * accepted, refused for good, or worth retrying (network errors, timeouts, 401/403/404 while an
 * operator fixes the configuration, 408, 409, 429, 5xx).
 */
export class UpstreamSender {
  private client?: Promise<{ agent: Dispatcher; request: typeof import('undici').request }>

  private readonly base: string

  constructor(private readonly opts: SenderOptions) {
    this.base = baseOf(opts.endpoint)
  }

  private url(kind: UsageKind): string {
    return this.base + PATHS[kind]
  }

  async send(kind: UsageKind, bodies: Record<string, unknown>[], signal: AbortSignal): Promise<SendOutcome> {
    const { agent, request } = await (this.client ??= import('undici').then(({ Agent, request }) => ({ agent: new Agent({ keepAliveTimeout: 30_000, connections: 4 }), request })))
    // One controller per request, unhooked from the exporter's long-lived signal afterwards:
    // AbortSignal.any([timeout, signal]) leaves a trace on `signal` per request that Node 20 never frees.
    const ac = new AbortController()
    const timer = setTimeout(() => ac.abort(new DOMException('timed out', 'TimeoutError')), this.opts.timeoutMs)
    const stop = () => ac.abort(signal.reason)
    if (signal.aborted) stop()
    else signal.addEventListener('abort', stop, { once: true })
    try {
      const res = await request(this.url(kind), {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': this.opts.apiKey, 'user-agent': 'meterd-upstream/1' },
        body: JSON.stringify(bodies.length === 1 ? bodies[0] : bodies),
        dispatcher: agent,
        headersTimeout: this.opts.timeoutMs,
        bodyTimeout: this.opts.timeoutMs,
        signal: ac.signal,
      })
      // A huge or endless body must not fill the memory: its status is what counts.
      const text = await readCapped(res.body, MAX_BODY)
      const status = res.statusCode
      if (status >= 200 && status < 300) return { kind: 'acked', status }
      const error = errorOf(status, text)
      // Redirects are not followed (the key would go wherever they point): say where, so the endpoint can be fixed.
      const location = status >= 300 && status < 400 ? res.headers.location : undefined
      if (typeof location === 'string') error.message += ` (a redirect to ${location.slice(0, 200)}, not followed: set the endpoint to it)`
      if (status === 413 && error.code === 'batch_too_large' && bodies.length > 1) return { kind: 'batch_too_large', status, error: error.message, limit: error.limit }
      if (REFUSED.has(status)) return { kind: 'refused', status, error: error.message, index: bodies.length > 1 ? error.index : 0 }
      return { kind: 'retry', status, error: error.message, afterMs: this.retryAfter(res.headers['retry-after']) }
    } catch (err) {
      const e = err as Error & { code?: string }
      return { kind: 'retry', error: e.name === 'TimeoutError' || ac.signal.reason?.name === 'TimeoutError' ? 'timed out' : `${e.code ?? e.name}: ${e.message}` }
    } finally {
      clearTimeout(timer)
      signal.removeEventListener('abort', stop)
    }
  }

  async close(): Promise<void> {
    if (this.client) await (await this.client).agent.close().catch(() => undefined)
  }

  private retryAfter(v: string | string[] | undefined): number | undefined {
    const s = (Array.isArray(v) ? v[0] : v)?.trim()
    if (!s) return undefined
    // Delay-seconds or an HTTP-date (RFC 9110 §10.2.3); anything else is ignored.
    const ms = /^\d+$/.test(s) ? Number(s) * 1000 : /[a-z]/i.test(s) ? Date.parse(s) - Date.now() : NaN
    if (Number.isNaN(ms)) return undefined
    return Math.min(Math.max(0, ms), this.opts.maxRetryAfterMs)
  }
}

/** Bytes of an answer read at most (a batch's 2xx lists an id per record); the rest is not read. */
const MAX_BODY = 1024 * 1024

/** Up to `limit` bytes of a body as text; the rest is discarded unread (the connection is closed). */
async function readCapped(body: Dispatcher.ResponseData['body'], limit: number): Promise<string> {
  const chunks: Buffer[] = []
  let size = 0
  try {
    for await (const chunk of body) {
      chunks.push(chunk as Buffer)
      size += (chunk as Buffer).length
      if (size > limit) break // leaving the loop destroys the body
    }
  } catch {
    // A body cut short (reset, timeout): the status is what counts.
  }
  return Buffer.concat(chunks).subarray(0, limit).toString('utf8')
}

/**
 * The upstream's error message and code, the batch index its `param` names (`[3].model` → 3), and
 * on a `batch_too_large` the most records it takes: its `max_batch_items` field, or from the
 * message of a meterd that predates the field ("at most 7 records per request").
 */
function errorOf(status: number, text: string): { message: string; code?: string; index?: number; limit?: number } {
  try {
    const e = JSON.parse(text)?.error
    if (e && typeof e === 'object') {
      const m = typeof e.param === 'string' ? /^\[(\d+)\]/.exec(e.param) : null
      const code = typeof e.code === 'string' ? e.code : undefined
      // Capped: it is logged and kept with a dead letter, and the upstream chooses its length.
      const message = `HTTP ${status} ${e.code ?? ''}: ${e.message ?? ''}`.trim().slice(0, 500)
      return { message, code, index: m ? Number(m[1]) : undefined, limit: code === 'batch_too_large' ? batchLimitOf(e) : undefined }
    }
  } catch {}
  return { message: `HTTP ${status}` }
}

function batchLimitOf(e: { max_batch_items?: unknown; message?: unknown }): number | undefined {
  const stated = e.max_batch_items ?? (typeof e.message === 'string' ? /at most (\d+) records/.exec(e.message)?.[1] : undefined)
  const n = Number(stated)
  return Number.isSafeInteger(n) && n >= 1 ? n : undefined
}
