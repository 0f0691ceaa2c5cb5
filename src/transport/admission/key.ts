import type { AdmissionRequest } from './types.js'

const BEARER = /^Bearer\s+(\S+)\s*$/i

/**
 * The API key a request presents: `x-api-key`, else `Authorization: Bearer <key>` (DESIGN §4),
 * else a key the transport found elsewhere (`req.apiKey`). Header names are the same in HTTP
 * headers and gRPC metadata.
 */
export function presentedKey(req: AdmissionRequest): string | undefined {
  const x = req.header('x-api-key')
  if (x !== undefined) {
    const key = x.trim()
    if (key !== '') return key
  }
  const auth = req.header('authorization')
  if (auth !== undefined) {
    const m = BEARER.exec(auth)
    if (m) return m[1]
  }
  return req.apiKey || undefined
}
