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

/** Charges counted outside the request's write unit, and the way back when the request then fails. */
export interface Counted {
  applied: Applied[]
  /**
   * The request's records were not stored: its moves are taken back, so the period's quantities
   * are those of the stored records and a retry is priced as if this attempt never happened.
   * Exact when no other event moved the aggregate since (the usual case, and always for a retry
   * of the same request on any replica); otherwise COUNT, SUM and AVERAGE are moved back by this
   * request's own contribution and a MAXIMUM or a DISTINCT value another event may have been
   * priced against stays. Rejects with `sharedStateUnavailable()` when the shared store is gone.
   */
  giveBack(): Promise<void>
}

/**
 * Tier quantities shared by the replicas of a gateway cluster: they move before the request's
 * records commit (in another store), so a request that fails after pricing gives its moves back.
 */
export interface SharedTierQuantities extends TierQuantities {
  count(charges: ToolCharge[], now: number): Promise<Counted>
}
