/**
 * The attribution dimensions analytics filters and groups by (DESIGN §8: the same for every
 * endpoint and for alerts), in the order of a tuple's columns.
 */
export const DIMENSIONS = [
  'organizationName',
  'productName',
  'subscriberId',
  'subscriberCredentialName',
  'agent',
  'provider',
  'model',
  'toolId',
  'environment',
] as const
export type Dimension = (typeof DIMENSIONS)[number]

export const DIM: { readonly [K in Dimension]: number } = Object.fromEntries(DIMENSIONS.map((d, i) => [d, i])) as never

/** How a filter compares a record's value with its own (alerts use all four; the endpoints `equals`). */
export type FilterOp = 'equals' | 'contains' | 'startsWith' | 'endsWith'
export const FILTER_OPS: readonly FilterOp[] = ['equals', 'contains', 'startsWith', 'endsWith']

export interface DimensionFilter {
  dimension: Dimension
  op: FilterOp
  /** Non-empty. Providers compare case-insensitively (clients spell them differently: wire-contract §1.2). */
  value: string
}

/** Providers are kept lower-cased: "OpenAI", "openai" and "OPENAI" are one provider. */
export function normalise(dimension: Dimension, value: string): string {
  return dimension === 'provider' ? value.toLowerCase() : value
}
