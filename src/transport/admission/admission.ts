import { ApiError } from '../../core/errors.js'
import type { AdmissionHook, AdmissionRequest, Authenticator, Principal } from './types.js'

type Refusal = ApiError | undefined

const noAuthenticator = new ApiError(401, 'authentication_error', 'no_authenticator', 'no authenticator extension is configured')

/**
 * Admission, the same for every transport (DESIGN §3): authenticate → error-pattern block →
 * count against the bucket → scope. Extensions plug in: one authenticator (`apikeys`) and
 * hooks (`ratelimit`). A transport describes each request as an AdmissionRequest, calls
 * `admit` before routing to the handler, and `observe` with the final status.
 *
 * `admit` answers synchronously when every stage does (the memory rate-limit backend), so the
 * usual request allocates no promise here.
 */
export class Admission {
  private authenticator?: Authenticator
  private readonly hooks: AdmissionHook[] = []

  setAuthenticator(a: Authenticator): void {
    this.authenticator = a
  }

  addHook(hook: AdmissionHook): void {
    this.hooks.push(hook)
  }

  /**
   * Undefined when the request may proceed (then `req.principal` is its caller, unless the
   * request has no bucket), else the error to answer. `req.responseHeaders` holds the headers
   * to send with either answer.
   */
  admit(req: AdmissionRequest): Refusal | Promise<Refusal> {
    // Public operations routes (and paths outside every family) need no key and count nowhere.
    if (req.bucket === null) return undefined
    const who = this.authenticator ? this.authenticator.authenticate(req) : noAuthenticator
    if (who instanceof ApiError) return this.unauthenticated(req, who, 0)
    req.principal = who
    return this.hooksFrom(req, who, 0)
  }

  /** Tells every hook the final status of a request (error-pattern accounting counts 4xx answers). */
  observe(req: AdmissionRequest, status: number): void {
    for (let i = 0; i < this.hooks.length; i++) this.hooks[i].observe?.(req, status)
  }

  /** A hook may answer an unauthenticated request with its own refusal (a blocked IP's 429) instead of the 401. */
  private unauthenticated(req: AdmissionRequest, error: ApiError, from: number): Refusal | Promise<Refusal> {
    for (let i = from; i < this.hooks.length; i++) {
      const refused = this.hooks[i].admitUnauthenticated?.(req)
      if (refused instanceof Promise) return refused.then((r) => r ?? this.unauthenticated(req, error, i + 1))
      if (refused) return refused
    }
    return error
  }

  private hooksFrom(req: AdmissionRequest, who: Principal, from: number): Refusal | Promise<Refusal> {
    for (let i = from; i < this.hooks.length; i++) {
      const refused = this.hooks[i].admit(req)
      if (refused instanceof Promise) return refused.then((r) => r ?? this.hooksFrom(req, who, i + 1))
      if (refused) return refused
    }
    return scopeCheck(req, who)
  }
}

/** The route's scope, checked last: a key without it still counted against its bucket. */
function scopeCheck(req: AdmissionRequest, who: Principal): Refusal {
  const scope = req.scope
  if (scope === null || who.scopes.includes(scope) || who.scopes.includes('admin')) return undefined
  return new ApiError(403, 'permission_error', 'insufficient_scope', `this key lacks the ${scope} scope`)
}
