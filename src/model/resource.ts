import type { UsageRecord } from './usage-record.js'

/** A stored record as the read API and webhook events show it: the client's fields as sent, then what meterd added. */
export function toResource(r: UsageRecord): Record<string, unknown> {
  const out: Record<string, unknown> = { ...r.body }
  out.id = r.id
  out.created = r.receivedAt
  out.eventTime = r.eventTime
  out.team = { id: r.caller.team }
  out.environment = r.body.environment ?? r.attribution.environment
  out.attributed = r.attributed
  if (r.cost) {
    out.cost = r.cost
    if (out.totalCost === undefined || out.totalCost === null) out.totalCost = Number(r.cost.total)
    // The price book's parts (inputTokenCost, …) as JSON numbers too; `cost` keeps the exact strings.
    for (const [part, v] of Object.entries(r.cost.parts)) {
      if (part.endsWith('TokenCost') && (out[part] === undefined || out[part] === null)) out[part] = Number(v)
    }
  }
  return out
}
