import type { Handler, Route } from './server.js'

interface Node {
  statics: Map<string, Node>
  param?: { name: string; node: Node }
  handlers: Map<string, Route>
}

const newNode = (): Node => ({ statics: new Map(), handlers: new Map() })

/** A segment trie: static segments win over `:param` segments. */
export class Router {
  private readonly root = newNode()
  /** Routes without parameters by `METHOD /path`: the ingest routes, found without splitting the path. */
  private readonly exact = new Map<string, Route>()

  add(route: Route): void {
    let node = this.root
    const segs = split(route.path)
    for (const seg of segs) {
      if (seg.startsWith(':')) {
        const name = seg.slice(1)
        if (!node.param) node.param = { name, node: newNode() }
        else if (node.param.name !== name) throw new Error(`route ${route.path}: parameter :${name} clashes with :${node.param.name}`)
        node = node.param.node
      } else {
        let next = node.statics.get(seg)
        if (!next) node.statics.set(seg, (next = newNode()))
        node = next
      }
    }
    if (node.handlers.has(route.method)) throw new Error(`route ${route.method} ${route.path} is mounted twice`)
    node.handlers.set(route.method, route)
    if (!segs.some((seg) => seg.startsWith(':'))) this.exact.set(`${route.method} /${segs.join('/')}`, route)
  }

  /** The route for method+path, `405` when the path exists with other methods, else undefined. */
  find(method: string, path: string): { route: Route; params: Record<string, string> } | 405 | undefined {
    // A static segment always wins over a parameter, so an exact hit is what the walk would find.
    const exact = this.exact.get(`${method} ${path}`)
    if (exact) return { route: exact, params: {} }
    const params: Record<string, string> = {}
    const node = walk(this.root, split(path), 0, params)
    if (!node || node.handlers.size === 0) return undefined
    const route = node.handlers.get(method) ?? (method === 'HEAD' ? node.handlers.get('GET') : undefined)
    return route ? { route, params } : 405
  }
}

function walk(node: Node, segs: string[], i: number, params: Record<string, string>): Node | undefined {
  if (i === segs.length) return node
  const s = node.statics.get(segs[i])
  if (s) {
    const found = walk(s, segs, i + 1, params)
    if (found && found.handlers.size) return found
  }
  if (node.param) {
    let value: string
    try {
      value = decodeURIComponent(segs[i])
    } catch {
      return undefined
    }
    const found = walk(node.param.node, segs, i + 1, params)
    if (found && found.handlers.size) {
      params[node.param.name] = value
      return found
    }
  }
  return undefined
}

function split(path: string): string[] {
  return path.split('/').filter(Boolean)
}

export type { Handler }
