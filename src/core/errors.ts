/**
 * The error taxonomy of the pipeline, after the Collector's consumererror package:
 * a consumer fails permanently (the data is bad; retrying cannot help), retryably
 * (a downstream is unavailable), or throttled (retry after a delay). `ApiError` is what
 * the HTTP surface answers; `toApiError` is the one place that maps the taxonomy to it.
 */

export type ErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'not_found_error'
  | 'conflict_error'
  | 'rate_limit_error'
  | 'api_error'

/**
 * Where the error reference is served: every meterd answers `GET /docs/errors` with the package's
 * docs/errors.md, one `## code` section per code. The HTTP server makes doc_url absolute with the
 * request's own origin, so it always points at the daemon that answered.
 */
export const DOC_PATH = '/docs/errors'

/** An error answered to an HTTP client, in DESIGN §3's shape. */
export class ApiError extends Error {
  readonly status: number
  readonly type: ErrorType
  readonly code: string
  readonly param?: string
  /** Extra response headers (Retry-After, …). */
  readonly headers: Record<string, string>
  /** Extra fields put into the `error` object (e.g. `bucket` on a 429). */
  readonly extra: Record<string, unknown>

  constructor(
    status: number,
    type: ErrorType,
    code: string,
    message: string,
    opts: { param?: string; headers?: Record<string, string>; extra?: Record<string, unknown> } = {},
  ) {
    super(message)
    this.status = status
    this.type = type
    this.code = code
    this.param = opts.param
    this.headers = opts.headers ?? {}
    this.extra = opts.extra ?? {}
  }

  /** `origin`: the base URL the client called (`http://host:port`), which serves DOC_PATH. */
  body(origin = ''): { error: Record<string, unknown> } {
    const error: Record<string, unknown> = {
      type: this.type,
      code: this.code,
      message: this.message,
      doc_url: `${origin}${DOC_PATH}#${this.code}`,
    }
    if (this.param !== undefined) error.param = this.param
    Object.assign(error, this.extra)
    return { error }
  }
}

export const invalid = (code: string, message: string, param?: string, status = 400): ApiError =>
  new ApiError(status, 'invalid_request_error', code, message, { param })
export const notFound = (message = 'resource not found', param?: string): ApiError =>
  new ApiError(404, 'not_found_error', 'resource_not_found', message, { param })
export const conflict = (code: string, message: string, headers?: Record<string, string>): ApiError =>
  new ApiError(409, 'conflict_error', code, message, { headers })

/**
 * An error made without a stack trace, for the ones made per item of a large input (a bad span
 * of an OTLP export) whose stacks nobody reads: an export of 100,000 bad spans spent 1.3 s of the
 * event loop capturing them.
 */
export class StacklessError extends Error {
  constructor(message: string) {
    const limit = Error.stackTraceLimit
    Error.stackTraceLimit = 0
    super(message)
    Error.stackTraceLimit = limit
  }
}

/** Data that can never be accepted; retrying the same data fails the same way. */
export class PermanentError extends Error {
  readonly kind = 'permanent' as const
  constructor(
    message: string,
    /** Required: every code the API answers has its section in docs/errors.md. */
    readonly code: string,
    /** The offending field, as a dotted path into the client's body (`subscriber.id`). */
    readonly param?: string,
    /** Index of the offending item when a batch was sent. */
    readonly index?: number,
  ) {
    super(message)
  }
}

/** A downstream failed in a way that may succeed later. */
export class RetryableError extends Error {
  readonly kind = 'retryable' as const
  constructor(message: string, override readonly cause?: unknown) {
    super(message)
  }
}

/**
 * The store could not commit (a full disk, an I/O error): nothing of the request was stored.
 * Retryable: the store probes itself and takes writes again once it can (src/store/write-health.ts).
 */
export class StoreUnwritableError extends RetryableError {
  constructor(message: string, readonly retryAfterMs: number, cause?: unknown) {
    super(message, cause)
  }
}

/** The StoreUnwritableError behind `err` (itself, its cause, or a failed branch of a fan-out), if any. */
export function storeUnwritableIn(err: unknown): StoreUnwritableError | undefined {
  for (let e = err, depth = 0; e instanceof Error && depth < 4; e = (e as { cause?: unknown }).cause, depth++) {
    if (e instanceof StoreUnwritableError) return e
    if (e instanceof FanoutError) {
      for (const o of e.outcomes) {
        const found = o.error && storeUnwritableIn(o.error)
        if (found) return found
      }
    }
  }
  return undefined
}

/** A downstream is overloaded: retry after `delayMs`. */
export class ThrottledError extends Error {
  readonly kind = 'throttled' as const
  constructor(message: string, readonly delayMs: number) {
    super(message)
  }
}

export type ConsumerError = PermanentError | RetryableError | ThrottledError

/** Outcome of one branch of a fan-out. */
export interface BranchOutcome {
  readonly id: string
  readonly error?: Error
}

/** A fan-out where at least one branch failed; every branch's outcome is kept. */
export class FanoutError extends Error {
  readonly kind: 'permanent' | 'retryable' | 'throttled'
  constructor(readonly outcomes: BranchOutcome[]) {
    const failed = outcomes.filter((o) => o.error)
    super(failed.map((o) => `${o.id}: ${o.error!.message}`).join('; '))
    // A permanent failure of any branch is permanent for the data; otherwise the
    // mildest classification that still tells the client to come back.
    const kinds = failed.map((o) => classify(o.error!))
    this.kind = kinds.includes('permanent') ? 'permanent' : kinds.includes('throttled') ? 'throttled' : 'retryable'
  }

  get delayMs(): number {
    let d = 0
    for (const o of this.outcomes) if (o.error instanceof ThrottledError) d = Math.max(d, o.error.delayMs)
    return d
  }
}

export function classify(err: unknown): 'permanent' | 'retryable' | 'throttled' {
  if (err instanceof PermanentError) return 'permanent'
  if (err instanceof ThrottledError) return 'throttled'
  if (err instanceof FanoutError) return err.kind
  return 'retryable'
}

/** The one mapping from anything thrown on a request path to what the client sees. */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err
  if (err instanceof PermanentError) {
    const param = err.index !== undefined && err.param ? `[${err.index}].${err.param}` : err.param
    return new ApiError(400, 'invalid_request_error', err.code, err.message, { param })
  }
  if (err instanceof ThrottledError || (err instanceof FanoutError && err.kind === 'throttled')) {
    const ms = err instanceof ThrottledError ? err.delayMs : err.delayMs
    return new ApiError(503, 'api_error', 'overloaded', 'the pipeline is overloaded; retry later', {
      headers: { 'retry-after': String(Math.max(1, Math.ceil(ms / 1000))) },
    })
  }
  if (err instanceof FanoutError && err.kind === 'permanent') {
    const first = err.outcomes.find((o) => o.error instanceof PermanentError)?.error
    if (first) return toApiError(first)
  }
  const unwritable = storeUnwritableIn(err)
  if (unwritable) {
    return new ApiError(503, 'api_error', 'store_unwritable', 'the data directory cannot be written at the moment (is its disk full?); nothing was stored: retry later', {
      headers: { 'retry-after': String(Math.max(1, Math.ceil(unwritable.retryAfterMs / 1000))) },
    })
  }
  // Retryable failures and anything unexpected: the data was NOT stored; say so and ask for a retry.
  return new ApiError(503, 'api_error', 'unavailable', 'the record could not be stored; retry later', {
    headers: { 'retry-after': '1' },
  })
}
