import { BlockList, isIP, type LookupFunction } from 'node:net'
import { lookup as dnsLookup, type LookupAddress } from 'node:dns'

/** Ranges a webhook must not reach unless the operator allows them (SSRF guard). */
const PRIVATE_V4: [string, number][] = [
  ['0.0.0.0', 8], ['10.0.0.0', 8], ['100.64.0.0', 10], ['127.0.0.0', 8], ['169.254.0.0', 16],
  ['172.16.0.0', 12], ['192.0.0.0', 24], ['192.168.0.0', 16], ['198.18.0.0', 15], ['224.0.0.0', 4], ['240.0.0.0', 4],
]
/**
 * IPv6 ranges refused outright. The ranges that embed an IPv4 address (::/96, ::ffff:0:0/96,
 * 64:ff9b::/96, 2002::/16, Teredo) are judged by that address instead (embeddedV4 below);
 * 64:ff9b:1::/48 is NAT64 for local use only (RFC 8215), so it is internal whatever it embeds.
 */
const PRIVATE_V6: [string, number][] = [
  ['::', 128], ['::1', 128], ['fc00::', 7], ['fe80::', 10], ['fec0::', 10], ['ff00::', 8], ['100::', 64], ['64:ff9b:1::', 48],
]

/** How long creation waits for a name to resolve before accepting it (delivery checks again). */
const RESOLVE_TIMEOUT_MS = 5000

export class DestinationRefused extends Error {
  readonly code = 'destination_refused'
}

/** getaddrinfo, as `dns.lookup(name, {all: true})` calls it; injectable for tests of names no resolver knows. */
export type Resolve = (hostname: string, callback: (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void) => void
const systemResolve: Resolve = (hostname, callback) => dnsLookup(hostname, { all: true }, callback)

/** The 16 bytes of an IPv6 address (already checked by isIP), including the `::a.b.c.d` forms. */
function v6Bytes(ip: string): Uint8Array {
  let s = ip
  const tail: number[] = []
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(s)
  if (dotted) {
    tail.push(...dotted.slice(1).map(Number))
    s = s.slice(0, dotted.index) + '0:0' // placeholder: two groups, overwritten below
  }
  const [head, rest] = s.includes('::') ? s.split('::') : [s, undefined]
  const groups = (x: string | undefined) => (x ? x.split(':').filter((g) => g !== '').map((g) => parseInt(g, 16)) : [])
  const h = groups(head)
  const r = rest === undefined ? [] : groups(rest)
  const all = rest === undefined ? h : [...h, ...new Array(8 - h.length - r.length).fill(0), ...r]
  const out = new Uint8Array(16)
  all.forEach((g, i) => {
    out[i * 2] = g >> 8
    out[i * 2 + 1] = g & 0xff
  })
  if (tail.length) out.set(tail, 12)
  return out
}

const v4Of = (b: Uint8Array, at: number, xor = 0) => [0, 1, 2, 3].map((i) => b[at + i] ^ xor).join('.')
const zero = (b: Uint8Array, from: number, to: number) => b.subarray(from, to).every((x) => x === 0)

/**
 * The IPv4 address an IPv6 address stands for, and whether the IPv6 address *is* that host
 * (mapped and compatible forms: the operator's IPv4 allow list applies) or only leads to it
 * through a translator or tunnel (NAT64, 6to4, Teredo: refused when what it embeds is internal).
 */
function embeddedV4(ip: string): { v4: string; sameHost: boolean } | undefined {
  const b = v6Bytes(ip)
  if (zero(b, 0, 10) && b[10] === 0xff && b[11] === 0xff) return { v4: v4Of(b, 12), sameHost: true } // ::ffff:a.b.c.d
  if (zero(b, 0, 12)) return { v4: v4Of(b, 12), sameHost: true } // ::a.b.c.d (deprecated compatible form; :: and ::1 too)
  if (b[0] === 0x00 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && zero(b, 4, 12)) return { v4: v4Of(b, 12), sameHost: false } // 64:ff9b::/96
  if (b[0] === 0x20 && b[1] === 0x02) return { v4: v4Of(b, 2), sameHost: false } // 2002::/16 (6to4)
  if (b[0] === 0x20 && b[1] === 0x01 && b[2] === 0 && b[3] === 0) return { v4: v4Of(b, 12, 0xff), sameHost: false } // 2001::/32 (Teredo client, obfuscated)
  return undefined
}

/**
 * Decides whether an address may be called. Checked when a configuration is created or
 * changed (the URL's literal address, or every address its name resolves to) and again on
 * the resolved address at connect time (the lookup hook below), so a name that later
 * re-resolves to a private address is still refused.
 */
export class DestinationGuard {
  private readonly blocked = new BlockList()
  private readonly allowed = new BlockList()

  /** `allow`: addresses or CIDRs (e.g. `127.0.0.1`, `10.1.0.0/16`) exempt from the guard. */
  constructor(allow: readonly string[] = [], private readonly resolve: Resolve = systemResolve) {
    for (const [a, p] of PRIVATE_V4) this.blocked.addSubnet(a, p, 'ipv4')
    for (const [a, p] of PRIVATE_V6) this.blocked.addSubnet(a, p, 'ipv6')
    for (const entry of allow) {
      const [addr, bits] = entry.split('/')
      const type = isIP(addr) === 6 ? 'ipv6' : 'ipv4'
      if (!isIP(addr)) throw new Error(`allow_private_destinations: "${entry}" is not an address or CIDR`)
      if (bits === undefined) this.allowed.addAddress(addr, type)
      else this.allowed.addSubnet(addr, Number(bits), type)
    }
  }

  /** True when the address is private, loopback, link-local or otherwise internal and not allowed. */
  refuses(address: string): boolean {
    const ip = address.replace(/^\[|\]$/g, '')
    const kind = isIP(ip)
    if (kind === 4) return this.blocked.check(ip, 'ipv4') && !this.allowed.check(ip, 'ipv4')
    if (kind !== 6) return true
    if (this.allowed.check(ip, 'ipv6')) return false
    const inner = embeddedV4(ip)
    if (inner) return inner.sameHost ? this.refuses(inner.v4) : this.blocked.check(inner.v4, 'ipv4') || this.blocked.check(ip, 'ipv6')
    return this.blocked.check(ip, 'ipv6')
  }

  /** Throws DestinationRefused for a URL meterd must not call whatever its name resolves to: an internal address literal, a loopback name, port 0. */
  checkLiteral(url: URL): void {
    if (url.port === '0') throw new DestinationRefused('port 0 cannot be called')
    const host = url.hostname.replace(/^\[|\]$/g, '')
    if (isIP(host) && this.refuses(host)) throw new DestinationRefused(`${host} is a private, loopback or link-local address`)
    if (isLoopbackName(host) && this.refuses('127.0.0.1')) throw new DestinationRefused(`${host} is a loopback name`)
  }

  /**
   * checkLiteral, then for a name: resolves it now and refuses it when every address it
   * resolves to is refused (delivery would find nothing to call). A name that does not resolve
   * (yet) is accepted: every connection is checked again.
   */
  async check(url: URL): Promise<void> {
    this.checkLiteral(url)
    const host = url.hostname
    if (isIP(host.replace(/^\[|\]$/g, '')) || isLoopbackName(host)) return
    const addresses = await new Promise<LookupAddress[] | undefined>((resolve) => {
      const timer = setTimeout(() => resolve(undefined), RESOLVE_TIMEOUT_MS)
      timer.unref()
      this.resolve(host, (err, list) => {
        clearTimeout(timer)
        resolve(err ? undefined : list)
      })
    })
    if (!addresses?.length) return
    if (addresses.every((a) => this.refuses(a.address)))
      throw new DestinationRefused(`${host} resolves to ${addresses.map((a) => a.address).join(', ')}: private, loopback or link-local`)
  }

  /** A `lookup` for net.connect that refuses private answers. */
  readonly lookup: LookupFunction = (hostname, options, callback) => {
    this.resolve(hostname, (err, addresses) => {
      if (err) return (callback as any)(err)
      const f = (options as { family?: number | string }).family
      const family = f === 'IPv4' ? 4 : f === 'IPv6' ? 6 : f
      const wanted = family === 4 || family === 6 ? addresses.filter((a) => a.family === family) : addresses
      const ok = wanted.filter((a) => !this.refuses(a.address))
      if (ok.length === 0) {
        return (callback as any)(new DestinationRefused(`${hostname} resolves only to private, loopback or link-local addresses`))
      }
      if ((options as { all?: boolean }).all) return (callback as any)(null, ok)
      ;(callback as any)(null, ok[0].address, ok[0].family)
    })
  }
}

/** `localhost` and its subdomains, also written fully qualified (`localhost.`), which the URL parser keeps. */
function isLoopbackName(host: string): boolean {
  const name = host.endsWith('.') ? host.slice(0, -1) : host
  return name === 'localhost' || name.endsWith('.localhost')
}
