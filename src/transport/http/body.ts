import { isUtf8 } from 'node:buffer'
import type { IncomingMessage } from 'node:http'
import { createGunzip, createInflate, type Gunzip, type Inflate } from 'node:zlib'
import { ApiError, invalid } from '../../core/errors.js'

export const tooLarge = (limit: number): ApiError =>
  invalid('body_too_large', `request body exceeds the ${limit}-byte limit`, undefined, 413)

/**
 * The bytes of request bodies being read at once in this process, every listener together
 * (server.max_body_bytes_in_flight). Each body is bounded on its own, but a body is held until it
 * is whole: without a bound on all of them, clients that send most of a large body and stop (or
 * many slow uploads) hold as much memory as they open connections. A body that would take the
 * total past the bound is refused with 503 `overloaded`; one alone is always read (a bound below
 * the largest body must not refuse it for good). OTLP/gRPC messages count too, from the moment
 * grpc-js hands one over whole until its call is answered (src/transport/grpc/server.ts).
 */
export class BodyBudget {
  private used = 0
  constructor(public limit: number) {}

  /**
   * Counts `bytes` more of a body that already holds `own` bytes of the budget. A body whose own
   * bytes are all that is in flight is alone, and is taken whatever its size (its route's limit
   * bounds it): counting its own earlier chunks would refuse it part-way, for good.
   */
  take(bytes: number, own = 0): boolean {
    if (this.used > own && this.used + bytes > this.limit) return false
    this.used += bytes
    return true
  }

  give(bytes: number): void {
    this.used -= bytes
  }
}

/** The process's budget; its limit is set from the config at start (src/host/service.ts). */
export const bodyBudget = new BodyBudget(256 * 1024 * 1024)

/** 503 overloaded: the bodies (and OTLP/gRPC messages) in flight hold the whole budget. */
export const overBudget = (): ApiError =>
  new ApiError(503, 'api_error', 'overloaded', `request bodies being received at once exceed server.max_body_bytes_in_flight (${bodyBudget.limit} bytes); retry later`, {
    headers: { 'retry-after': '1' },
  })

/**
 * Reads a request body up to `limit` bytes after decompression (gzip/deflate), so a
 * compressed bomb fails with 413 like any large body, and within the process's bodyBudget.
 * Rejects with an ApiError only.
 */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length'])
  if (declared > limit && !req.headers['content-encoding']) {
    req.resume()
    return Promise.reject(tooLarge(limit))
  }
  const encoding = (req.headers['content-encoding'] ?? 'identity').toLowerCase().trim()
  let source: NodeJS.ReadableStream = req
  let decoder: Gunzip | Inflate | undefined
  if (encoding === 'gzip' || encoding === 'x-gzip') decoder = createGunzip()
  else if (encoding === 'deflate') decoder = createInflate()
  else if (encoding !== 'identity') {
    req.resume()
    return Promise.reject(invalid('unsupported_content_encoding', `content-encoding ${encoding} is not supported; use gzip, deflate or none`, undefined, 415))
  }
  if (decoder) source = req.pipe(decoder)

  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    let done = false
    const fail = (err: ApiError): void => {
      if (done) return
      done = true
      bodyBudget.give(size)
      req.unpipe()
      req.resume() // drain what is left so the connection can answer
      decoder?.destroy()
      reject(err)
    }
    source.on('data', (chunk: Buffer) => {
      if (done) return
      if (size + chunk.length > limit) return fail(tooLarge(limit))
      if (!bodyBudget.take(chunk.length, size)) return fail(overBudget())
      size += chunk.length
      chunks.push(chunk)
    })
    source.on('end', () => {
      if (done) return
      done = true
      bodyBudget.give(size)
      resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size))
    })
    // Without a decoder the source is the request itself: one error listener, saying what failed.
    if (decoder) decoder.on('error', () => fail(invalid('bad_encoding', `the body is not valid ${encoding} data`)))
    // Also a connection closed mid-body (by the client, or by the server's request timeout):
    // Node destroys the request with an error, and its bytes go back to the budget.
    req.on('error', () => fail(invalid('bad_request', 'the request body could not be read')))
  })
}

export function isJsonContentType(header: string | undefined): boolean {
  if (!header) return false
  const semi = header.indexOf(';')
  const mime = (semi === -1 ? header : header.slice(0, semi)).trim().toLowerCase()
  return mime === 'application/json' || (mime.startsWith('application/') && mime.endsWith('+json'))
}

/**
 * The charset a JSON content type names when it is not UTF-8 (which RFC 8259 makes JSON's only
 * encoding on the wire), else undefined. `charset=utf-8` is what the Go SDK sends.
 */
export function jsonCharsetProblem(header: string | undefined): string | undefined {
  if (header === undefined || header.indexOf(';') === -1) return undefined
  for (const param of header.split(';').slice(1)) {
    const eq = param.indexOf('=')
    if (eq === -1 || param.slice(0, eq).trim().toLowerCase() !== 'charset') continue
    const charset = param.slice(eq + 1).trim().replace(/^"(.*)"$/, '$1').toLowerCase()
    if (charset !== 'utf-8' && charset !== 'utf8') return charset
  }
  return undefined
}

/**
 * Parses JSON (after a leading byte order mark), refusing input nested deeper than `maxDepth`
 * (before it can reach recursive code), bytes that are not UTF-8 and strings holding a lone
 * surrogate (`"\ud800"`): neither can be stored as the text the client meant (each would become
 * U+FFFD).
 */
export function parseJson(buf: Buffer, maxDepth: number): unknown {
  let text = buf.toString('utf8')
  // A UTF-8 byte order mark before the JSON (what .NET and PowerShell write) is ignored, as
  // RFC 8259 §8.1 allows; JSON.parse would refuse it as an unexpected token.
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1)
  // Bytes that are not UTF-8 decode to U+FFFD, so a text without one came from UTF-8 and the
  // native check of every byte is needed only when there is one (a one-byte string, the usual
  // body, cannot hold it: that indexOf answers at once).
  if (text.indexOf('\uFFFD') !== -1 && !isUtf8(buf)) throw invalid('invalid_unicode', 'the body is not valid UTF-8')
  if (exceedsDepth(text, maxDepth)) {
    throw invalid('nesting_too_deep', `JSON nested deeper than ${maxDepth} levels`)
  }
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch (err) {
    throw invalid('malformed_json', `the body is not valid JSON: ${(err as Error).message}`)
  }
  // Only a \uD800–\uDFFF escape can make a lone surrogate (the bytes were checked above), and
  // bodies rarely hold one: the strings are walked only then.
  if (text.indexOf('\\u') !== -1 && SURROGATE_ESCAPE.test(text) && !wellFormed(value)) throw invalid('invalid_unicode', 'a JSON string holds a lone UTF-16 surrogate (\\uD800–\\uDFFF without its pair)')
  return value
}

const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/
// String.prototype.isWellFormed is in Node 20 but not in the ES2022 lib the build targets.
const isWellFormed = (s: string): boolean => (s as unknown as { isWellFormed(): boolean }).isWellFormed()

/** Every string (and key) in a parsed value is well-formed UTF-16 (the depth was limited before parsing). */
function wellFormed(v: unknown): boolean {
  if (typeof v === 'string') return isWellFormed(v)
  if (typeof v !== 'object' || v === null) return true
  if (Array.isArray(v)) return v.every(wellFormed)
  for (const k in v) if (!isWellFormed(k) || !wellFormed((v as Record<string, unknown>)[k])) return false
  return true
}

/** A linear scan of brackets outside strings; cheap next to JSON.parse itself. */
function exceedsDepth(text: string, max: number): boolean {
  // Fast path for the usual small record: nesting can never be deeper than the number of
  // `{` and `[` in the text (counted natively with indexOf, strings included), so with at
  // most `max` of them the character scan below cannot find anything.
  if (openingBrackets(text, max + 1) <= max) return false
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 92 /* \ */) i++
      else if (c === 34 /* " */) inString = false
    } else if (c === 34) inString = true
    else if (c === 123 || c === 91) {
      if (++depth > max) return true
    } else if (c === 125 || c === 93) depth--
  }
  return false
}

/** How many `{` and `[` the text holds, counting no further than `stopAt`. */
function openingBrackets(text: string, stopAt: number): number {
  let n = 0
  for (let i = text.indexOf('{'); i !== -1 && n < stopAt; i = text.indexOf('{', i + 1)) n++
  for (let i = text.indexOf('['); i !== -1 && n < stopAt; i = text.indexOf('[', i + 1)) n++
  return n
}
