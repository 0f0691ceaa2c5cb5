import type { Tool } from '../tools/tool.js'
import { toolPriceVersion } from '../tools/tool.js'
import type { Cost, ToolRecord } from '../../model/usage-record.js'
import { ZERO, dec, money, moneyOfUnits, unitsOfMoney } from './money.js'
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
