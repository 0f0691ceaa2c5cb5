import type { IncomingMessage } from 'node:http'
import { createGunzip, createInflate, type Gunzip, type Inflate } from 'node:zlib'
import { ApiError, invalid } from '../../core/errors.js'

export const tooLarge = (limit: number): ApiError =>
  invalid('body_too_large', `request body exceeds the ${limit}-byte limit`, undefined, 413)

/**
 * Reads a request body up to `limit` bytes after decompression (gzip/deflate), so a
 * compressed bomb fails with 413 like any large body. Rejects with an ApiError only.
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
      req.unpipe()
      req.resume() // drain what is left so the connection can answer
      decoder?.destroy()
      reject(err)
    }
    source.on('data', (chunk: Buffer) => {
      if (done) return
      size += chunk.length
      if (size > limit) return fail(tooLarge(limit))
      chunks.push(chunk)
    })
    source.on('end', () => {
      if (done) return
      done = true
      resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size))
    })
    source.on('error', () => fail(invalid('bad_encoding', `the body is not valid ${encoding} data`)))
    req.on('error', () => fail(invalid('bad_request', 'the request body could not be read')))
  })
}

export function isJsonContentType(header: string | undefined): boolean {
  if (!header) return false
  const semi = header.indexOf(';')
  const mime = (semi === -1 ? header : header.slice(0, semi)).trim().toLowerCase()
  return mime === 'application/json' || (mime.startsWith('application/') && mime.endsWith('+json'))
}

/** Parses JSON, refusing input nested deeper than `maxDepth` (before it can reach recursive code). */
export function parseJson(buf: Buffer, maxDepth: number): unknown {
  const text = buf.toString('utf8')
  if (exceedsDepth(text, maxDepth)) {
    throw invalid('nesting_too_deep', `JSON nested deeper than ${maxDepth} levels`)
  }
  try {
    return JSON.parse(text)
  } catch (err) {
    throw invalid('malformed_json', `the body is not valid JSON: ${(err as Error).message}`)
  }
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
