/**
 * The copies of one request's items that went down several pipelines at once (a routing
 * connector's `match_once: false`, a receiver or connector feeding several pipelines), so that a
 * component those pipelines share takes each item once: an exporter reached by two routes stores,
 * counts and sends the record once, not once per route (src/host/fanout.ts, takeOnce). A
 * component in each of the pipelines that must act once per record (pricing's tier moves,
 * src/processors/pricing/copies.ts) shares one result among the copies (recall, remember).
 *
 * Made only by a fan-out that copies an item, and kept on the request's context
 * (BatchContext.copies): a request whose items each go one way carries none, and the components
 * it reaches pay nothing for it.
 */
export class Copies {
  /** Each copy (and its original) → the item it is a copy of: the first original, through fan-outs one after another. */
  private readonly origin = new Map<unknown, unknown>()
  /** Per component: the items it has taken. */
  private readonly taken = new Map<object, Set<unknown>>()
  /** Per first original: what was worked out once for all its copies, by key (see remember). */
  private readonly results = new Map<unknown, Map<string, unknown>>()

  /** `copy` is a copy of `item` (which may itself be a copy, from an earlier fan-out). */
  add(item: unknown, copy: unknown): void {
    let root = this.origin.get(item)
    if (root === undefined) this.origin.set(item, (root = item))
    this.origin.set(copy, root)
  }

  /** Whether `taker` takes `item` now: false when it took another copy of the same item before. */
  claim(taker: object, item: unknown): boolean {
    const root = this.origin.get(item)
    if (root === undefined) return true // an item that went one way only
    let seen = this.taken.get(taker)
    if (seen === undefined) this.taken.set(taker, (seen = new Set()))
    if (seen.has(root)) return false
    seen.add(root)
    return true
  }

  /**
   * What `remember` kept under `key` for another copy of `item` (or for `item` itself), else
   * undefined: a component in each of the pipelines (a pricing processor's tier moves) works a
   * thing out for the first copy to reach it and hands the others the same result.
   */
  recall<T>(item: unknown, key: string): T | undefined {
    const root = this.origin.get(item)
    return root === undefined ? undefined : (this.results.get(root)?.get(key) as T | undefined)
  }

  /** Keeps `value` under `key` for every copy of `item`; nothing for an item that went one way only. */
  remember(item: unknown, key: string, value: unknown): void {
    const root = this.origin.get(item)
    if (root === undefined) return
    let byKey = this.results.get(root)
    if (byKey === undefined) this.results.set(root, (byKey = new Map()))
    byKey.set(key, value)
  }
}
