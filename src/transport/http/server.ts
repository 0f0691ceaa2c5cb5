import { parseEndpoint } from '../../core/endpoint.js'
import { createServer, STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import type { Logger } from 'pino'
import { ApiError, invalid, toApiError } from '../../core/errors.js'
import { presentedKey, type Admission, type AdmissionRequest, type Principal, type RateLimitBucket, type Scope } from '../admission/index.js'
import { jsonCharsetProblem, isJsonContentType, parseJson, readBody } from './body.js'
import { pathFamilies } from './families.js'
import { Router, type Match, type Miss } from './router.js'

export { SCOPES } from '../admission/index.js'
export type { Principal, RateLimitBucket, Scope }

/** An HTTP request as handlers see it; admission reads it as an AdmissionRequest. */
export interface RequestContext extends AdmissionRequest {
  readonly req: IncomingMessage
  readonly method: string
  readonly path: string
  /** The query string; `get` of a parameter given more than once is a 400 (see Query). */
  readonly query: Query
  params: Record<string, string>
  /** The body as bytes (decompressed, size-limited). */
  raw(): Promise<Buffer>
  /** The body as JSON; 415 unless the content type is JSON in UTF-8, 400 when malformed. */
  json(): Promise<unknown>
  /**
   * The body's bytes after json()'s content-type checks (415), for a handler that needs both
   * the bytes and their JSON (`parseJson(bytes)`) without awaiting twice.
   */
  jsonBytes(): Promise<Buffer>
  /** What json() resolves with, from the bytes jsonBytes() gave: 400 when empty or malformed. */
  parseJson(bytes: Buffer): unknown
}

/**
 * URLSearchParams whose `get` refuses a parameter given twice with different values:
 * `?size=5&size=500` would otherwise be read as whichever one the route happens to take,
 * silently. The same value twice is no question (the Go CLI appends `teamId` to every URL,
 * which may already carry it). Only the parameters a route reads are judged, so unknown ones
 * stay ignored, as metering routes need. A value read that is not valid percent-encoding is
 * refused the same way, naming it.
 */
export class Query extends URLSearchParams {
  /** Names whose value, as sent, is not valid percent-encoding (`%FF`, a bare `%`); URLSearchParams would read U+FFFD or a literal `%`. */
  private readonly malformed = new Set<string>()

  constructor(search: string) {
    super(search)
    for (const pair of search.replace(/^\?/, '').split('&')) {
      const eq = pair.indexOf('=')
      if (eq < 0) continue
      try {
        decodeURIComponent(pair.slice(eq + 1))
      } catch {
        for (const [name] of new URLSearchParams(pair.slice(0, eq) + '=')) this.malformed.add(name)
      }
    }
  }

  override get(name: string): string | null {
    const all = this.getAll(name)
    if (all.length === 0) return null
    for (let i = 1; i < all.length; i++)
      if (all[i] !== all[0]) throw invalid('invalid_parameter', `${name} is given more than once, with different values`, name)
    return all[0]
  }

  /** A parameter a route reads whose value is not valid percent-encoding is a 400 naming it, as an id in a path is. */
  override getAll(name: string): string[] {
    if (this.malformed.has(name))
      throw invalid('invalid_parameter', `${name} is not valid percent-encoding: a % must start %XX escapes of UTF-8 bytes`, name)
    return super.getAll(name)
  }
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

/** A route declares how it is admitted where it is defined, as fastify's route options do. */
export interface Route {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE'
  /** Segments, with `:name` for parameters. */
  path: string
  /** The rate-limit bucket it counts against; null for public operations routes (no key). */
  bucket: RateLimitBucket | null
  /** The scope a key needs; null: any valid key (with a bucket) or none (without). */
  scope: Scope | null
  handler: Handler
  /** The largest body this route reads, after decompression (413 above it); default server.max_body_bytes. */
  maxBodyBytes?: number
  /**
   * Finds an API key in the body when no header carries one (OTLP's `<prefix>api_key` resource
   * attribute, for clients that cannot set headers). Called before admission, only then; a body
   * it cannot read yields no key (admission answers 401).
   */
  payloadKey?: (ctx: RequestContext) => Promise<string | undefined>
  /**
   * The answer to an error of this route, when the protocol it serves fixes its own error body
   * (OTLP/HTTP: a protobuf request gets a protobuf google.rpc.Status); undefined for the JSON
   * error shape of DESIGN §3. Status and headers stay the error's.
   */
  errorReply?: (err: ApiError, ctx: RequestContext) => Reply | undefined
}

export interface HttpServerOptions {
  apiPrefix: string
  maxBodyBytes: number
  maxJsonDepth: number
  logger: Logger
  admission: Admission
  /** Told of every answered request: its route template (never the raw path), status and duration. */
  requests?: RequestObserver
  /** How long a request may take to arrive whole, headers and body (default 60 s); then 408. */
  requestTimeoutMs?: number
}

export interface RequestObserver {
  observe(method: string, route: string, status: number, seconds: number): void
}

/** Ids in paths are short (meterd's own are under 300 characters); a longer one is refused before any store sees it. */
const MAX_PATH_PARAM_BYTES = 512

/**
 * The one listener of the base URL. Components mount routes on it; every request is admitted
 * once (src/transport/admission), then routed to its handler.
 */
export class HttpServer {
  private readonly router = new Router<Route>()
  private server?: Server
  private inFlight = 0

  constructor(readonly opts: HttpServerOptions) {
    for (const [prefix, bucket] of pathFamilies(opts.apiPrefix)) this.router.family(prefix, bucket)
  }

  route(route: Route): void {
    if (route.bucket === undefined) throw new Error(`route ${route.method} ${route.path} declares no bucket (null for a public route)`)
    if (route.scope !== null && route.bucket === null)
      throw new Error(`route ${route.method} ${route.path}: a route that needs a key counts against a bucket`)
    this.router.add(route)
  }

  async listen(endpoint: string): Promise<AddressInfo> {
    const { host, port } = parseEndpoint(endpoint)
    // requireHostHeader off: a request without Host is answered by handle(), in the error shape.
    const requestTimeout = this.opts.requestTimeoutMs ?? 60_000
    // Node checks the request timeout every connectionsCheckingInterval (30 s by default), so a
    // stalled request is cut between requestTimeout and requestTimeout + that interval.
    const server = createServer(
      { keepAliveTimeout: 65_000, requestTimeout, connectionsCheckingInterval: Math.min(30_000, requestTimeout / 2), requireHostHeader: false },
      (req, res) => {
        void this.handle(req, res)
      },
    )
    // Malformed HTTP never reaches a handler; answer it in the error shape and move on.
    server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
      // A request answered before its body arrived whole (413, 415) has had its response: a second
      // one, when the rest never comes, would be read as the answer to the client's next request.
      if (!socket.writable || err.code === 'ECONNRESET' || answeredEarly.get(socket)?.complete === false) return socket.destroy()
      const error = clientError(err, requestTimeout, socket as Socket)
      const body = JSON.stringify(error.body(originOf(undefined, socket as Socket)))
      socket.end(
        `HTTP/1.1 ${error.status} ${STATUS_CODES[error.status]}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
      )
    })
    // An Expect other than 100-continue never reaches a handler either: Node answers it 417
    // with an empty body, which a client cannot read an error from.
    server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
      const expect = String(req.headers.expect).slice(0, 100)
      const err = new ApiError(417, 'invalid_request_error', 'expectation_failed', `Expect: ${expect} is not supported; only 100-continue is`, { param: 'Expect' })
      const body = JSON.stringify(err.body(originOf(req.headers.host, req.socket)))
      res.writeHead(417, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), connection: 'close' })
      res.end(body)
    })
    // CONNECT (a client taking meterd for a proxy) never reaches a handler either, and without a
    // listener Node drops the connection with no answer at all.
    server.on('connect', (req: IncomingMessage, socket: Socket) => {
      const err = new ApiError(405, 'invalid_request_error', 'method_not_allowed', 'CONNECT is not supported: meterd is not a proxy')
      const body = JSON.stringify(err.body(originOf(req.headers.host, socket)))
      socket.on('error', () => socket.destroy())
      socket.end(`HTTP/1.1 405 Method Not Allowed\r\nallow: \r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`)
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
      const url = originForm(req.url ?? '/')
      const q = url.indexOf('?')
      let path = q === -1 ? url : url.slice(0, q)
      if (path.length > 1 && path.endsWith('/')) path = path.slice(0, -1)
      const method = req.method ?? 'GET'
      const found = this.router.find(method, path)
      ctx = new Ctx(req, method, path, q === -1 ? '' : url.slice(q + 1), found, this.opts)
      // Admission and routing are plain functions that return the handler's promise as it is:
      // each async stage between the socket and the handler would cost a promise and a
      // microtask turn per request.
      const reply = this.admitAndRoute(ctx, found)
      this.send(res, ctx, reply instanceof Promise ? await reply : reply)
    } catch (err) {
      const apiErr = toApiError(err)
      // A 503 that names a state of the daemon (the store cannot write, a queue is full, analytics
      // is loading) is logged where that state begins and counted in metrics, not once per
      // request: under load a log line with a stack per request would bury everything else.
      if (apiErr.status >= 500 && !STATE_CODES.has(apiErr.code)) this.opts.logger.error({ err, path: req.url }, 'request failed')
      this.send(res, ctx, ctx ? ctx.errorReply(apiErr) : errorReply(apiErr))
    } finally {
      this.inFlight--
    }
  }

  private admitAndRoute(ctx: Ctx, found: Match<Route> | Miss): Reply | Promise<Reply> {
    // HTTP/1.1 requires Host (RFC 9112 §3.2); Node would answer its absence with an empty 400.
    if (ctx.req.headers.host === undefined && ctx.req.httpVersionMinor >= 1 && ctx.req.httpVersionMajor === 1)
      return ctx.errorReply(invalid('missing_host', 'an HTTP/1.1 request must carry a Host header', 'Host'))
    const payloadKey = found.route?.payloadKey
    if (payloadKey && presentedKey(ctx) === undefined)
      return payloadKey(ctx)
        .catch(() => undefined)
        .then((key) => {
          ctx.apiKey = key
          return this.admitted(ctx, found)
        })
    return this.admitted(ctx, found)
  }

  private admitted(ctx: Ctx, found: Match<Route> | Miss): Reply | Promise<Reply> {
    const refused = this.opts.admission.admit(ctx)
    if (refused instanceof Promise) return refused.then((r) => (r ? ctx.errorReply(r) : this.routed(ctx, found)))
    return refused ? ctx.errorReply(refused) : this.routed(ctx, found)
  }

  /** The handler's answer (its promise as it is, not adopted), or the 404/405 of a path without a route. */
  private routed(ctx: Ctx, found: Match<Route> | Miss): Reply | Promise<Reply> {
    if (found.route === undefined) {
      if (found.status === 405) {
        const err = new ApiError(405, 'invalid_request_error', 'method_not_allowed', `${ctx.method} is not allowed on ${ctx.path}; allowed: ${found.allow}`, {
          headers: { allow: found.allow },
        })
        return errorReply(err)
      }
      return errorReply(new ApiError(404, 'not_found_error', 'route_not_found', `no route ${ctx.method} ${ctx.path}`))
    }
    if (found.malformed !== undefined)
      return ctx.errorReply(invalid('invalid_parameter', `${found.malformed} is not valid percent-encoding: a % must start %XX escapes of UTF-8 bytes`, found.malformed))
    const params = found.params
    for (const name in params) {
      if (Buffer.byteLength(params[name]) > MAX_PATH_PARAM_BYTES)
        return ctx.errorReply(invalid('invalid_parameter', `${name} is longer than any identifier meterd issues (at most ${MAX_PATH_PARAM_BYTES} bytes)`, name))
    }
    ctx.params = params
    return found.route.handler(ctx)
  }

  private send(res: ServerResponse, ctx: Ctx | undefined, reply: Reply): void {
    if (ctx) {
      this.opts.admission.observe(ctx, reply.status)
      this.opts.requests?.observe(ctx.method, ctx.route, reply.status, (performance.now() - ctx.started) / 1000)
    }
    if (res.headersSent) return
    const headers: Record<string, string | number> = { ...(ctx?.responseHeaders ?? {}), ...(reply.headers ?? {}) }
    let payload: string | Buffer | undefined
    if (reply.text !== undefined) {
      payload = reply.text
      headers['content-type'] = reply.contentType ?? 'text/plain; charset=utf-8'
    } else if (reply.body !== undefined) {
      // An error's doc_url is a path on this daemon until here, where the origin is known.
      const error = (reply.body as { error?: { doc_url?: unknown } } | null)?.error
      if (ctx && typeof error?.doc_url === 'string' && error.doc_url.startsWith('/')) error.doc_url = originOf(ctx.req.headers.host, ctx.req.socket) + error.doc_url
      payload = JSON.stringify(reply.body)
      headers['content-type'] = 'application/json'
    }
    if (payload !== undefined) headers['content-length'] = Buffer.byteLength(payload)
    res.writeHead(reply.status, headers)
    res.end(ctx?.method === 'HEAD' ? undefined : payload)
    if (ctx && !ctx.req.complete) answeredEarly.set(ctx.req.socket, ctx.req)
  }
}

const ABSOLUTE_FORM = /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i

/**
 * The request target as a path and query. A server must accept the absolute form
 * (`POST http://host:8080/meter/v2/ai/completions`, what a client configured for a proxy sends;
 * RFC 9112 §3.2.2): its scheme and authority are dropped, an authority alone being the path `/`.
 */
function originForm(target: string): string {
  if (target.charCodeAt(0) === 47 /* / */) return target
  const m = ABSOLUTE_FORM.exec(target)
  if (!m) return target
  const rest = target.slice(m[0].length)
  return rest.charCodeAt(0) === 47 ? rest : '/' + rest
}

/** What a connection's error, caught before any handler, is answered with. */
function clientError(err: NodeJS.ErrnoException, requestTimeoutMs: number, socket: Socket): ApiError {
  // A head past Node's limit (16 KiB, request target and headers counted together) is well-formed
  // HTTP, too large: 414 or 431 says which part to shrink.
  if (err.code === 'HPE_HEADER_OVERFLOW') {
    const { rawPacket, bytesParsed } = err as ParseError
    if (targetOverflowed(rawPacket, bytesParsed, socket.bytesRead === rawPacket?.length))
      return new ApiError(414, 'invalid_request_error', 'uri_too_long', 'the request target (path and query) is longer than meterd reads: the request line and headers may hold 16 KiB in all')
    return new ApiError(431, 'invalid_request_error', 'headers_too_large', 'the request headers are larger than 16 KiB in all (with the request target)')
  }
  // Headers or a body that stopped arriving are well-formed so far, and late: 408, not malformed.
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT')
    return new ApiError(408, 'invalid_request_error', 'request_timeout', `the request did not arrive whole (headers and body) within ${requestTimeoutMs / 1000} s`)
  return new ApiError(400, 'invalid_request_error', 'bad_http', 'malformed HTTP request')
}

/** What Node adds to a parser's error: the bytes of the read it failed in, and where in them it stopped. */
interface ParseError extends NodeJS.ErrnoException {
  rawPacket?: Buffer
  bytesParsed?: number
}

/** A request line begins with its method (a token) and a space; a header line has a colon after its name. */
const REQUEST_LINE_START = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+ /

/**
 * Whether the part of the head that passed Node's limit is the request target (else a header).
 * The parser stops where that part ends, or at the end of the bytes it was given (`raw`, one read
 * of the socket). When the line it stopped in starts within them (after a line feed, or at the
 * start of the connection's first read) the line says: a request line starts `METHOD `. Else the
 * read is the middle of a line: a target ends at the space before the HTTP version, a header name
 * after its colon, a header value at its line end. A read that ends inside the line shows neither
 * (a long target or header arriving in pieces): 431, whose message names both.
 */
function targetOverflowed(raw: Buffer | undefined, stoppedAt: number | undefined, firstRead: boolean): boolean {
  if (raw === undefined || stoppedAt === undefined) return false
  const end = Math.min(stoppedAt, raw.length)
  const lineFeed = end === 0 ? -1 : raw.lastIndexOf(0x0a, end - 1)
  if (lineFeed !== -1 || firstRead) return REQUEST_LINE_START.test(raw.toString('latin1', lineFeed + 1, Math.min(end, lineFeed + 1 + 32)))
  return end < raw.length && end > 0 && raw[end] === 0x20 && raw[end - 1] !== 0x3a /* : */
}

/**
 * The last request of a connection answered before it arrived whole (413 from its Content-Length,
 * 415, or a GET answered before Node parsed the end of its message): the rest is drained, and if
 * it stops coming the request timeout must not answer it again (clientError). Once it has arrived
 * whole, an error of the connection's next request is that request's, and is answered.
 */
const answeredEarly = new WeakMap<object, IncomingMessage>()

/** 5xx codes that answer for a state the daemon logs and counts elsewhere (see handle). */
const STATE_CODES = new Set(['store_unwritable', 'overloaded', 'analytics_loading'])

/** The base URL a client called: its Host header, else the address it reached. */
function originOf(host: string | undefined, socket: { localAddress?: string; localPort?: number }): string {
  if (host) return `http://${host}`
  const a = socket.localAddress ?? '127.0.0.1'
  return `http://${a.includes(':') ? `[${a}]` : a}:${socket.localPort ?? ''}`
}

export function errorReply(err: ApiError): Reply {
  return { status: err.status, body: err.body(), headers: err.headers }
}

class Ctx implements RequestContext {
  params: Record<string, string> = {}
  principal?: Principal
  readonly responseHeaders: Record<string, string> = {}
  readonly bucket: RateLimitBucket | null
  readonly scope: Scope | null
  apiKey?: string
  /** The route's template (`/tools/:id`), or `unmatched`: a label that cannot grow with paths. */
  readonly route: string
  readonly started = performance.now()
  private readonly maxBodyBytes: number
  private readonly routeErrorReply?: Route['errorReply']
  private body?: Promise<Buffer>
  private parsedQuery?: Query

  constructor(
    readonly req: IncomingMessage,
    readonly method: string,
    readonly path: string,
    private readonly search: string,
    found: Match<Route> | Miss,
    private readonly opts: HttpServerOptions,
  ) {
    // A path without a route is admitted like the routes of its place (router.ts, Miss).
    this.bucket = found.route ? found.route.bucket : found.bucket
    this.scope = found.route ? found.route.scope : null
    this.maxBodyBytes = found.route?.maxBodyBytes ?? opts.maxBodyBytes
    this.route = found.route?.path ?? 'unmatched'
    this.routeErrorReply = found.route?.errorReply
  }

  /** The answer to `err`: the route's own error body when it has one, else DESIGN §3's shape. */
  errorReply(err: ApiError): Reply {
    return this.routeErrorReply?.(err, this) ?? errorReply(err)
  }

  header(name: string): string | undefined {
    const v = this.req.headers[name]
    return typeof v === 'string' ? v : v?.[0]
  }

  /** Parsed on first use: ingest routes never read it. */
  get query(): Query {
    return (this.parsedQuery ??= new Query(this.search))
  }

  get ip(): string {
    return this.req.socket.remoteAddress ?? ''
  }

  raw(): Promise<Buffer> {
    return (this.body ??= readBody(this.req, this.maxBodyBytes))
  }

  jsonBytes(): Promise<Buffer> {
    const type = this.req.headers['content-type']
    // What nearly every client sends, taken without parsing the header.
    if (type === 'application/json') return this.raw()
    if (!isJsonContentType(type)) {
      this.req.resume()
      return Promise.reject(new ApiError(415, 'invalid_request_error', 'unsupported_media_type', 'the body must be application/json'))
    }
    const charset = jsonCharsetProblem(type)
    if (charset !== undefined) {
      this.req.resume()
      return Promise.reject(
        new ApiError(415, 'invalid_request_error', 'unsupported_charset', `charset ${charset} is not supported: send JSON as UTF-8`, { param: 'Content-Type' }),
      )
    }
    return this.raw()
  }

  parseJson(bytes: Buffer): unknown {
    if (bytes.length === 0) throw new ApiError(400, 'invalid_request_error', 'empty_body', 'the request body is empty')
    return parseJson(bytes, this.opts.maxJsonDepth)
  }

  async json(): Promise<unknown> {
    return this.parseJson(await this.jsonBytes())
  }
}

export { parseEndpoint }
