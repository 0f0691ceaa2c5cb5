import type { PricingElement } from '../model/pricing-element.js'

/** What an event contributed to each element: its cost C(after) − C(before) and its quantity (decimal strings). */
export interface Applied {
  parts: Record<string, string>
  quantities: Record<string, string>
}

/** One tool event to apply: its aggregate key prefix (scope + period) and the tool's elements. */
export interface ToolCharge {
  recordId: string
  /** The event's team and transactionId, when it has one: a duplicate of a stored record never counts. */
  transaction?: { team: string; id: string }
  /** [team, ...scope values, toolId, period]. */
  scope: string[]
  elements: PricingElement[]
  usageMetadata: Record<string, unknown> | undefined
}

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
   * priced against stays. Rejects with the 503 `shared_state_unavailable` when the shared store does
   * not answer; the moves are then given back once it does (before this replica moves those
   * aggregates again), a move whose own answer was lost only if it was made.
   *
   * `only`: the indexes of the charges whose moves go back, the others' staying (a record priced in
   * several pipelines, src/processors/pricing/copies.ts). A move is given back once, whatever asks.
   */
  giveBack(only?: readonly number[]): Promise<void>
}

/**
 * Tier quantities shared by the replicas of a gateway cluster: they move before the request's
 * records commit (in another store), so a request that fails after pricing gives its moves back.
 */
export interface SharedTierQuantities extends TierQuantities {
  count(charges: ToolCharge[], now: number): Promise<Counted>
}
