import type { Tool } from '../tools/tool.js'
import { toolPriceVersion } from '../tools/tool.js'
import type { Cost, ToolRecord } from '../../model/usage-record.js'
import { Decimal, ZERO, dec, money, moneyOfUnits, parseQuantity, unitsOfMoney } from './money.js'
import type { Applied, ToolCharge } from '../../ports/tiers.js'
import { periodOf, type BillingPeriod } from './aggregates.js'

/** The dimensions a period aggregate may be scoped by (processor config `tools.scope`). */
export const SCOPE_DIMENSIONS = [
  'account', 'tenant', 'team', 'environment', 'organizationName', 'productName', 'subscriberId',
  'subscriberCredentialName', 'agent', 'workflowId', 'traceId', 'subscriptionId',
] as const
export type ScopeDimension = (typeof SCOPE_DIMENSIONS)[number]

export interface ToolPricingOptions {
  billingPeriod: BillingPeriod
  scope: readonly ScopeDimension[]
}

function dimension(r: ToolRecord, d: ScopeDimension): string {
  switch (d) {
    case 'account':
    case 'tenant':
    case 'team':
      return r.caller[d]
    default:
      return r.attribution[d]
  }
}

// A processor's scope list is fixed: its joined spelling is built once, not per event.
const shapes = new WeakMap<readonly ScopeDimension[], string>()
function scopeShape(scope: readonly ScopeDimension[]): string {
  let shape = shapes.get(scope)
  if (shape === undefined) shapes.set(scope, (shape = scope.join(',')))
  return shape
}

/** What an event adds to its tool's period aggregates: scope + period key, the elements, the values. */
export function toolCharge(r: ToolRecord, tool: Tool, o: ToolPricingOptions): ToolCharge {
  const tx = r.body.transactionId
  return {
    recordId: r.id,
    transaction: typeof tx === 'string' && tx !== '' ? { team: r.caller.team, id: tx } : undefined,
    // The scope's own shape leads the key, so changing `scope` starts new aggregates, never mixes them.
    scope: [scopeShape(o.scope), ...o.scope.map((d) => dimension(r, d)), tool.toolId, periodOf(r.eventTime, o.billingPeriod)],
    elements: tool.pricing.elements,
    usageMetadata: r.body.usageMetadata ?? undefined,
  }
}

/**
 * The most one tool event may bring to a SUM, AVERAGE or MAXIMUM element. With prices at most
 * 10^9 (money.ts) an event's cost stays under 10^24, which ClickHouse's Decimal128(12) holds, and
 * the period aggregates stay exact; past it 1e300 was priced at a 301-digit cost, and the events
 * after it in the period added nothing (a sum that large keeps 60 significant digits). Past 2^53
 * a JSON number is not even the quantity the client counted.
 */
export const MAX_QUANTITY = 1e15

/** The usageMetadata value past MAX_QUANTITY that an element of the tool would count, as a 400's param and message. */
export function quantityTooLarge(r: ToolRecord, tool: Tool): { param: string; message: string } | undefined {
  const meta = r.body.usageMetadata
  if (meta === undefined || meta === null) return undefined
  for (const el of tool.pricing.elements) {
    if (el.aggregationType === 'COUNT' || el.aggregationType === 'DISTINCT' || !Object.hasOwn(meta, el.name)) continue
    const v = meta[el.name]
    // A number compares as it is; a numeric string (rare) is read as parseQuantity reads it.
    const tooLarge = typeof v === 'number' ? v > MAX_QUANTITY : typeof v === 'string' && (parseQuantity(v)?.gt(MAX_QUANTITY) ?? false)
    if (tooLarge) {
      const param = `usageMetadata.${el.name}`
      return { param, message: `${param} must be at most ${new Decimal(MAX_QUANTITY).toFixed()}, the most one event may count towards the price of ${el.name}` }
    }
  }
  return undefined
}

/** The record's cost from what its charge moved: Σ C(after) − C(before), or the client's costUsd. */
export function toolCost(r: ToolRecord, tool: Tool, applied: Applied): Cost {
  const priceVersion = toolPriceVersion(tool)
  if (typeof r.body.costUsd === 'number') {
    // costUsd overrides the cost; the quantities were still counted (DESIGN §6).
    return { currency: 'USD', total: money(dec(r.body.costUsd)), parts: {}, source: 'client', priceVersion, quantities: applied.quantities }
  }
  return { currency: 'USD', total: sumOfParts(applied.parts), parts: { ...applied.parts }, source: 'registry', priceVersion, quantities: applied.quantities }
}

/** Σ parts, exact: in BigInt for money strings (always, as the aggregates write them), else in Decimal. */
function sumOfParts(parts: Record<string, string>): string {
  const values = Object.values(parts)
  // One element (the usual tool): its part is the total. Parts are money strings as `money` and
  // `moneyOfUnits` write them (an element step's, or a stored record's), so no respelling is needed.
  if (values.length === 1) return values[0]
  let units = 0n
  for (const v of values) {
    const u = unitsOfMoney(v)
    if (u === null) return money(values.reduce((t, p) => t.plus(p), ZERO))
    units += u
  }
  return moneyOfUnits(units)
}

export const unknownTool = (): Cost => ({ currency: 'USD', total: '0', parts: {}, source: 'unpriced', note: 'unknown_tool' })
export const disabledTool = (tool: Tool): Cost => ({
  currency: 'USD',
  total: '0',
  parts: {},
  source: 'skipped',
  note: 'tool_disabled',
  metered: false,
  priceVersion: toolPriceVersion(tool),
})
