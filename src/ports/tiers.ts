import type { Applied, ToolCharge } from '../domain/pricing/aggregates.js'

/**
 * Period aggregates of tool pricing elements: each charge moves them
 * atomically, so an event's cost is C(after) − C(before) whichever replica prices it, and a
 * period's events add up to C(total) exactly. ToolAggregates (LMDB, standalone: its moves also run
 * inside the request's write unit) and RedisTierQuantities (gateway) implement it.
 */
export interface TierQuantities {
  /** Applies each charge in order and resolves with its per-element costs once they are final. */
  apply(charges: ToolCharge[], now: number): Promise<Applied[]>
}
