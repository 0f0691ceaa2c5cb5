/**
 * SPEC's pricing element of a tool, as stored: the data that the tool registry validates, the
 * pricing domain charges by (src/domain/pricing/tiers.ts) and the tier-quantity stores move
 * aggregates for (src/ports/tiers.ts).
 */

export const AGGREGATION_TYPES = ['SUM', 'COUNT', 'AVERAGE', 'MAXIMUM', 'DISTINCT'] as const
export type AggregationType = (typeof AGGREGATION_TYPES)[number]
export const TIERS_MODES = ['volume', 'graduated'] as const
export type TiersMode = (typeof TIERS_MODES)[number]

/** A tier as stored: prices as decimal strings; `upTo` null = unlimited. */
export interface Tier {
  upTo: string | null
  unitPrice: string
}

/** SPEC's pricing element, as stored (decimal strings, validated). */
export interface PricingElement {
  name: string
  unitPrice: string
  aggregationType: AggregationType
  tiersMode: TiersMode
  tiers: Tier[]
}
