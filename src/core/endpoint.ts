import { isIP } from 'node:net'

/** `host:port`, `[v6]:port` or `:port` / `port` (all interfaces, resp. 127.0.0.1) → host and port. */
export function parseEndpoint(endpoint: string): { host: string; port: number } {
  const i = endpoint.lastIndexOf(':')
  const host = i === -1 ? '127.0.0.1' : endpoint.slice(0, i).replace(/^\[|\]$/g, '') || '0.0.0.0'
  const portText = i === -1 ? endpoint : endpoint.slice(i + 1)
  const port = /^\d{1,5}$/.test(portText) ? Number(portText) : NaN
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`invalid endpoint "${endpoint}": expected host:port with a port from 0 to 65535`)
  if (!isIP(host) && !/^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$/.test(host))
    throw new Error(`invalid endpoint "${endpoint}": "${host}" is neither an IP address nor a host name`)
  return { host, port }
}

const WILDCARD = new Set(['0.0.0.0', '::'])

/** Whether two listeners would take the same port (the same host, or either on every interface). */
export function sameListener(a: { host: string; port: number }, b: { host: string; port: number }): boolean {
  if (a.port === 0 || a.port !== b.port) return false
  return a.host === b.host || WILDCARD.has(a.host) || WILDCARD.has(b.host)
}
