import { BlockList, isIP, type LookupFunction } from 'node:net'
import { lookup as dnsLookup } from 'node:dns'

/** Ranges a webhook must not reach unless the operator allows them (SSRF guard). */
const PRIVATE_V4: [string, number][] = [
  ['0.0.0.0', 8], ['10.0.0.0', 8], ['100.64.0.0', 10], ['127.0.0.0', 8], ['169.254.0.0', 16],
  ['172.16.0.0', 12], ['192.0.0.0', 24], ['192.168.0.0', 16], ['198.18.0.0', 15], ['224.0.0.0', 4], ['240.0.0.0', 4],
]
const PRIVATE_V6: [string, number][] = [['::', 128], ['::1', 128], ['fc00::', 7], ['fe80::', 10], ['ff00::', 8]]

export class DestinationRefused extends Error {
  readonly code = 'destination_refused'
}

/**
 * Decides whether an address may be called. Checked on the resolved address at connect
 * time (the lookup hook below), so a name that later re-resolves to a private address is
 * still refused.
 */
export class DestinationGuard {
  private readonly blocked = new BlockList()
  private readonly allowed = new BlockList()

  /** `allow`: addresses or CIDRs (e.g. `127.0.0.1`, `10.1.0.0/16`) exempt from the guard. */
  constructor(allow: readonly string[] = []) {
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
    let ip = address.replace(/^\[|\]$/g, '')
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip)
    if (mapped) ip = mapped[1]
    const type = isIP(ip) === 6 ? 'ipv6' : 'ipv4'
    if (!isIP(ip)) return true
    return this.blocked.check(ip, type) && !this.allowed.check(ip, type)
  }

  /** Throws DestinationRefused when a URL's host is an address literal the guard refuses. */
  checkLiteral(url: URL): void {
    const host = url.hostname.replace(/^\[|\]$/g, '')
    if (isIP(host) && this.refuses(host)) throw new DestinationRefused(`${host} is a private, loopback or link-local address`)
    if (host === 'localhost' || host.endsWith('.localhost')) {
      if (this.refuses('127.0.0.1')) throw new DestinationRefused(`${host} is a loopback name`)
    }
  }

  /** A `lookup` for net.connect that refuses private answers. */
  readonly lookup: LookupFunction = (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return (callback as any)(err)
      const list = addresses as unknown as { address: string; family: number }[]
      const ok = list.filter((a) => !this.refuses(a.address))
      if (ok.length === 0) {
        return (callback as any)(new DestinationRefused(`${hostname} resolves only to private, loopback or link-local addresses`))
      }
      if ((options as { all?: boolean }).all) return (callback as any)(null, ok)
      ;(callback as any)(null, ok[0].address, ok[0].family)
    })
  }
}
