import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Logger } from 'pino'
import { ApiError, toApiError } from '../../core/errors.js'
import type { Caller } from '../../model/usage-record.js'
import { isJsonContentType, parseJson, readBody } from './body.js'
import { bucketFor, type RateLimitBucket } from './buckets.js'
import { Router } from './router.js'

export type Scope = 'metering:write' | 'analytics:read' | 'platform:read' | 'platform:write' | 'admin'
export const SCOPES: readonly Scope[] = ['metering:write', 'analytics:read', 'platform:read', 'platform:write', 'admin']

/** The authenticated caller of a request: its key's identity and scopes. */
export interface Principal extends Caller {
  scopes: readonly Scope[]
}

export interface RequestContext {
  readonly req: IncomingMessage
  readonly method: string
  readonly path: string
  readonly query: URLSearchParams
  params: Record<string, string>
  readonly ip: string
  /** The bucket the path is counted in; null for operations routes. */
  readonly bucket: RateLimitBucket | null
  principal?: Principal
  /** Headers every answer to this request carries, whatever its status (rate-limit headers). */
  readonly responseHeaders: Record<string, string>
  /** The body as bytes (decompressed, size-limited). */
  raw(): Promise<Buffer>
  /** The body as JSON; 415 unless the content type is JSON, 400 when malformed. */
  json(): Promise<unknown>
}

export interface Reply {
  status: number
  /** Serialised as JSON unless `text` is given. */
  body?: unknown
  text?: string | Buffer
  contentType?: string
  headers?: Record<string, string>
}

export type Handler = (ctx: RequestContext) => Promise<Reply> | Reply

export interface Route {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE'
  /** Segments, with `:name` for parameters. */
  path: string
  /** The scope a key needs; `null` for public operations routes. */
  scope: Scope | null
  handler: Handler
}

export interface Authenticator {
  /** The principal of a request, or an ApiError (401) when its key is missing or unknown. */
  authenticate(ctx: RequestContext): Principal | ApiError
}

/**
 * A stage of admission that runs for every request that maps to a bucket, after
 * authentication and before routing (rate limiting plugs in here).
 */
export interface AdmissionHook {
  /** Refuse with an ApiError, or let the request through; may set ctx.responseHeaders. */
  admit(ctx: RequestContext): ApiError | undefined | Promise<ApiError | undefined>
  /**
   * Consulted when authentication failed, before the 401 is answered: may refuse with
   * another error instead (a 429 for a client IP blocked by error-pattern protection).
   */
  admitUnauthenticated?(ctx: RequestContext): ApiError | undefined | Promise<ApiError | undefined>
  /** Sees the final status of every request of a bucket (for error-pattern accounting); ctx.principal is unset for 401s. */
  observe?(ctx: RequestContext, status: number): void
}

export interface HttpServerOptions {
  apiPrefix: string
  maxBodyBytes: number
  maxJsonDepth: number
  logger: Logger
}

/**
 * The one listener of the base URL. Components mount routes on it; admission
 * (authenticate → admission hooks → scope → route) runs once here for every route.
 */
export class HttpServer {
  private readonly router = new Router()
  private readonly hooks: AdmissionHook[] = []
  private authenticator?: Authenticator
  private server?: Server
  private inFlight = 0

  constructor(readonly opts: HttpServerOptions) {}

  route(route: Route): void {
    this.router.add(route)
  }

  setAuthenticator(a: Authenticator): void {
    this.authenticator = a
  }

  addAdmissionHook(hook: AdmissionHook): void {
    this.hooks.push(hook)
  }

  get hasAuthenticator(): boolean {
    return this.authenticator !== undefined
  }

  async listen(endpoint: string): Promise<AddressInfo> {
    const { host, port } = parseEndpoint(endpoint)
    const server = createServer({ keepAliveTimeout: 65_000, requestTimeout: 60_000 }, (req, res) => {
      void this.handle(req, res)
    })
    // Malformed HTTP never reaches a handler; answer it in the error shape and move on.
    server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
      if (!socket.writable || err.code === 'ECONNRESET') return socket.destroy()
      const body = JSON.stringify(new ApiError(400, 'invalid_request_error', 'bad_http', 'malformed HTTP request').body())
      socket.end(`HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`)
    })
    this.server = server
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(port, host, () => {
        server.off('error', reject)
        resolve()
      })
    })
    return server.address() as AddressInfo
  }

  address(): AddressInfo | undefined {
    return (this.server?.address() as AddressInfo | null) ?? undefined
  }

  /** Stops accepting, lets in-flight requests finish until the deadline, then cuts what is left. */
  async close(deadlineMs: number): Promise<void> {
    const server = this.server
    if (!server) return
    this.server = undefined
    const closed = new Promise<void>((resolve) => server.close(() => resolve()))
    server.closeIdleConnections()
    const until = Date.now() + deadlineMs
    while (this.inFlight > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 10))
    server.closeAllConnections()
    await closed
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    this.inFlight++
    let ctx: Ctx | undefined
    try {
      const url = req.url ?? '/'
      const q = url.indexOf('?')
      let path = q === -1 ? url : url.slice(0, q)
      if (path.length > 1 && path.endsWith('/')) path = path.slice(0, -1)
      const method = req.method ?? 'GET'
      ctx = new Ctx(req, method, path, q === -1 ? '' : url.slice(q + 1), bucketFor(path, this.opts.apiPrefix), this.opts)
      const reply = await this.admitAndRoute(ctx)
      this.send(res, ctx, reply)
    } catch (err) {
      const apiErr = toApiError(err)
      if (apiErr.status >= 500) this.opts.logger.error({ err, path: req.url }, 'request failed')
      this.send(res, ctx, errorReply(apiErr))
    } finally {
      this.inFlight--
    }
  }

  private async admitAndRoute(ctx: Ctx): Promise<Reply> {
    const found = this.router.find(ctx.method, ctx.path)
    if (ctx.bucket !== null) {
      const who = this.authenticator?.authenticate(ctx) ??
        new ApiError(401, 'authentication_error', 'no_authenticator', 'no authenticator extension is configured')
      if (who instanceof ApiError) {
        for (const hook of this.hooks) {
          const refused = await hook.admitUnauthenticated?.(ctx)
          if (refused) return errorReply(refused)
        }
        return errorReply(who)
      }
      ctx.principal = who
      for (const hook of this.hooks) {
        const refused = await hook.admit(ctx)
        if (refused) return errorReply(refused)
      }
    }
    if (found === undefined) {
      return errorReply(new ApiError(404, 'not_found_error', 'route_not_found', `no route ${ctx.method} ${ctx.path}`))
    }
    if (found === 405) {
      return errorReply(new ApiError(405, 'invalid_request_error', 'method_not_allowed', `${ctx.method} is not allowed on ${ctx.path}`))
    }
    const { route, params } = found
    if (route.scope !== null) {
      const p = ctx.principal
      if (!p) return errorReply(new ApiError(401, 'authentication_error', 'missing_api_key', 'an API key is required'))
      if (!p.scopes.includes(route.scope) && !p.scopes.includes('admin')) {
        return errorReply(new ApiError(403, 'permission_error', 'insufficient_scope', `this key lacks the ${route.scope} scope`))
      }
    }
    ctx.params = params
    return route.handler(ctx)
  }

  private send(res: ServerResponse, ctx: Ctx | undefined, reply: Reply): void {
    if (ctx && ctx.bucket !== null) for (const hook of this.hooks) hook.observe?.(ctx, reply.status)
    if (res.headersSent) return
    const headers: Record<string, string | number> = { ...(ctx?.responseHeaders ?? {}), ...(reply.headers ?? {}) }
    let payload: string | Buffer | undefined
    if (reply.text !== undefined) {
      payload = reply.text
      headers['content-type'] = reply.contentType ?? 'text/plain; charset=utf-8'
    } else if (reply.body !== undefined) {
      payload = JSON.stringify(reply.body)
      headers['content-type'] = 'application/json'
    }
    if (payload !== undefined) headers['content-length'] = Buffer.byteLength(payload)
    res.writeHead(reply.status, headers)
    res.end(ctx?.method === 'HEAD' ? undefined : payload)
  }
}

export function errorReply(err: ApiError): Reply {
  return { status: err.status, body: err.body(), headers: err.headers }
}

class Ctx implements RequestContext {
  params: Record<string, string> = {}
  principal?: Principal
  readonly responseHeaders: Record<string, string> = {}
  private body?: Promise<Buffer>
  private parsedQuery?: URLSearchParams

  constructor(
    readonly req: IncomingMessage,
    readonly method: string,
    readonly path: string,
    private readonly search: string,
    readonly bucket: RateLimitBucket | null,
    private readonly opts: HttpServerOptions,
  ) {}

  /** Parsed on first use: ingest routes never read it. */
  get query(): URLSearchParams {
    return (this.parsedQuery ??= new URLSearchParams(this.search))
  }

  get ip(): string {
    return this.req.socket.remoteAddress ?? ''
  }

  raw(): Promise<Buffer> {
    return (this.body ??= readBody(this.req, this.opts.maxBodyBytes))
  }

  async json(): Promise<unknown> {
    if (!isJsonContentType(this.req.headers['content-type'])) {
      this.req.resume()
      throw new ApiError(415, 'invalid_request_error', 'unsupported_media_type', 'the body must be application/json')
    }
    const buf = await this.raw()
    if (buf.length === 0) throw new ApiError(400, 'invalid_request_error', 'empty_body', 'the request body is empty')
    return parseJson(buf, this.opts.maxJsonDepth)
  }
}

export function parseEndpoint(endpoint: string): { host: string; port: number } {
  const i = endpoint.lastIndexOf(':')
  const host = i === -1 ? '127.0.0.1' : endpoint.slice(0, i).replace(/^\[|\]$/g, '') || '0.0.0.0'
  const port = Number(i === -1 ? endpoint : endpoint.slice(i + 1))
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`invalid endpoint "${endpoint}": expected host:port`)
  return { host, port }
}
