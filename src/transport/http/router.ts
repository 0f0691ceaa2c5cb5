import type { RateLimitBucket } from '../admission/index.js'

/**
 * What the router reads of a route: where it is mounted and the bucket a miss beside it counts
 * against. The rest (handler, scope, limits) is the server's (server.ts, Route).
 */
export interface Placed {
  readonly method: string
  /** Segments, with `:name` for parameters. */
  readonly path: string
  readonly bucket: RateLimitBucket | null
}

/** A route found for a request: the route and its path parameters. */
export interface Match<R extends Placed> {
  readonly route: R
  readonly params: Record<string, string>
  /** A parameter whose segment is not valid percent-encoding (`%FF`, a bare `%`): its name; its value is the raw segment. */
  readonly malformed?: string
}

/**
 * No route for a request. Answered after admission, like a route of the same place would be:
 * `bucket` is what the request counts against (null: no key needed), `allow` the methods the
 * path has (405) — so a request without a valid key learns nothing about which paths exist.
 */
export interface Miss {
  readonly route: undefined
  readonly status: 404 | 405
  readonly bucket: RateLimitBucket | null
  /** The `Allow` header of a 405. */
  readonly allow: string
}

interface Node<R extends Placed> {
  statics: Map<string, Node<R>>
  param?: { name: string; node: Node<R> }
  handlers: Map<string, R>
  /** The 405 of this path, rebuilt when a method is added. */
  notAllowed?: Miss
}

const newNode = <R extends Placed>(): Node<R> => ({ statics: new Map(), handlers: new Map() })
const NO_PARAMS: Record<string, string> = Object.freeze({}) as Record<string, string>

/**
 * A segment trie: static segments win over `:param` segments. Beside the routes it holds the
 * path families (SPEC "Families of paths that exist"), which decide how a path that matches no
 * route is admitted.
 */
export class Router<R extends Placed> {
  private readonly root = newNode<R>()
  /** Routes without parameters by method, then path: the ingest routes, found without splitting the path or allocating. */
  private readonly exact = new Map<string, Map<string, Match<R>>>()
  private readonly families: { prefix: string; under: string; miss: Miss }[] = []
  private readonly outside: Miss = Object.freeze({ route: undefined, status: 404, bucket: null, allow: '' })

  add(route: R): void {
    let node = this.root
    const segs = split(route.path)
    for (const seg of segs) {
      if (seg.startsWith(':')) {
        const name = seg.slice(1)
        if (!node.param) node.param = { name, node: newNode<R>() }
        else if (node.param.name !== name) throw new Error(`route ${route.path}: parameter :${name} clashes with :${node.param.name}`)
        node = node.param.node
      } else {
        let next = node.statics.get(seg)
        if (!next) node.statics.set(seg, (next = newNode<R>()))
        node = next
      }
    }
    if (node.handlers.has(route.method)) throw new Error(`route ${route.method} ${route.path} is mounted twice`)
    node.handlers.set(route.method, route)
    const methods = [...node.handlers.keys()]
    if (methods.includes('GET')) methods.push('HEAD')
    // One path, one bucket: the first route of a path decides its 405s.
    const bucket = node.handlers.values().next().value!.bucket
    node.notAllowed = Object.freeze({ route: undefined, status: 405, bucket, allow: methods.join(', ') })
    if (!segs.some((seg) => seg.startsWith(':'))) {
      let paths = this.exact.get(route.method)
      if (!paths) this.exact.set(route.method, (paths = new Map()))
      paths.set(`/${segs.join('/')}`, { route, params: NO_PARAMS })
    }
  }

  /**
   * A family of paths (`/meter/v2` and everything under it): a path under it that matches no
   * route counts against `bucket` and needs a key before it is answered 404.
   */
  family(prefix: string, bucket: RateLimitBucket): void {
    this.families.push({ prefix, under: prefix + '/', miss: Object.freeze({ route: undefined, status: 404, bucket, allow: '' }) })
  }

  /** The route for method+path, or how to answer a path without one. */
  find(method: string, path: string): Match<R> | Miss {
    // A static segment always wins over a parameter, so an exact hit is what the walk would find.
    const exact = this.exact.get(method)?.get(path)
    if (exact) return exact
    const params: Record<string, string> = {}
    const malformed: string[] = []
    const node = walk(this.root, split(path), 0, params, malformed)
    if (node && node.handlers.size > 0) {
      const route = node.handlers.get(method) ?? (method === 'HEAD' ? node.handlers.get('GET') : undefined)
      if (!route) return node.notAllowed!
      return malformed.length === 0 ? { route, params } : { route, params, malformed: malformed[0] }
    }
    for (const f of this.families) if (path === f.prefix || path.startsWith(f.under)) return f.miss
    return this.outside
  }
}

/** The node of segs[i..], filling params; a parameter that does not decode is kept raw and named in `malformed` (the route answers it 400, not 404). */
function walk<R extends Placed>(node: Node<R>, segs: string[], i: number, params: Record<string, string>, malformed: string[]): Node<R> | undefined {
  if (i === segs.length) return node
  const s = node.statics.get(segs[i])
  if (s) {
    const found = walk(s, segs, i + 1, params, malformed)
    if (found && found.handlers.size) return found
  }
  if (node.param) {
    let value: string | undefined
    try {
      value = decodeURIComponent(segs[i])
    } catch {
      value = undefined
    }
    const found = walk(node.param.node, segs, i + 1, params, malformed)
    if (found && found.handlers.size) {
      params[node.param.name] = value ?? segs[i]
      if (value === undefined) malformed.push(node.param.name)
      return found
    }
  }
  return undefined
}

function split(path: string): string[] {
  return path.split('/').filter(Boolean)
}
