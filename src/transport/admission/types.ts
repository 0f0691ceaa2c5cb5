import type { ApiError } from '../../core/errors.js'
import type { Caller } from '../../model/usage-record.js'

/** The rate-limit buckets of SPEC's Limits. */
export type RateLimitBucket = 'metering' | 'analytics' | 'platform'

export type Scope = 'metering:write' | 'analytics:read' | 'platform:read' | 'platform:write' | 'admin'
export const SCOPES: readonly Scope[] = ['metering:write', 'analytics:read', 'platform:read', 'platform:write', 'admin']

/** The authenticated caller of a request: its key's identity and scopes. */
export interface Principal extends Caller {
  scopes: readonly Scope[]
}

/**
 * What admission needs to know of a request, whatever carried it (an HTTP request, a gRPC
 * call). A transport makes one per request (the HTTP server's request context is one) and
 * reads the outcome back from it: `principal` and `responseHeaders` are filled in by admission.
 */
export interface AdmissionRequest {
  /** A header (HTTP) or metadata entry (gRPC) by its lower-case name; undefined when absent. */
  header(name: string): string | undefined
  /**
   * A key the transport found outside the headers (OTLP's `<prefix>api_key` resource
   * attribute); consulted only when no header carries one.
   */
  readonly apiKey?: string
  /** The client's address: unauthenticated callers are counted by it (error-pattern). */
  readonly ip: string
  /** The bucket the request counts against; null: a public operations route, no key needed. */
  readonly bucket: RateLimitBucket | null
  /** The scope the route needs; null: any valid key will do (or none when `bucket` is null). */
  readonly scope: Scope | null
  /** Set by admission once the key is known. */
  principal?: Principal
  /** Headers every answer to the request carries, whatever its status (X-RateLimit-*); admission fills them. */
  readonly responseHeaders: Record<string, string>
}

export interface Authenticator {
  /** The principal of a request, or an ApiError (401) when its key is missing or unknown. */
  authenticate(req: AdmissionRequest): Principal | ApiError
}

/**
 * A stage of admission that runs for every request that counts against a bucket, after
 * authentication and before the scope check (rate limiting plugs in here).
 */
export interface AdmissionHook {
  /** Refuse with an ApiError, or let the request through; may set `req.responseHeaders`. `req.principal` is set. */
  admit(req: AdmissionRequest): ApiError | undefined | Promise<ApiError | undefined>
  /**
   * Consulted when authentication failed, before the 401 is answered: may refuse with
   * another error instead (a 429 for a client IP blocked by error-pattern protection).
   */
  admitUnauthenticated?(req: AdmissionRequest): ApiError | undefined | Promise<ApiError | undefined>
  /**
   * Sees the final status of every request, of a bucket or not (error-pattern accounting);
   * `req.principal` is unset when the request was not authenticated.
   */
  observe?(req: AdmissionRequest, status: number): void
}
