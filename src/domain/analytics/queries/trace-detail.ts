import type { UsageKind, UsageRecord } from '../../../model/usage-record.js'
import { ERROR, TOOL } from '../block.js'
import { DIM } from '../dimensions.js'
import { passes } from '../filters.js'
import type { AnalyticsQuery, TokenTotals } from '../query.js'
import { tokenTotals } from '../query.js'
import { readRow, RowInput } from '../row.js'

export interface TraceRecord {
  id: string
  kind: UsageKind
  /** ms since epoch */
  time: number
  agent: string | null
  provider?: string
  model?: string
  toolId?: string
  operation?: string
  cost: bigint
  durationMs: number | null
  error: boolean
  tokens?: TokenTotals
}

export interface TraceDetail {
  traceId: string
  cost: bigint
  tokenCost: bigint
  toolCost: bigint
  completions: number
  toolEvents: number
  start: number
  end: number
  agents: string[]
  /** In event-time order (ties by id). */
  records: TraceRecord[]
}

/**
 * One trace from its stored records (read from the store by traceId, so it shows every record
 * and every field, not only what the index keeps), restricted to the query's range and filters.
 */
export function traceDetail(traceId: string, stored: readonly UsageRecord[], q: Partial<AnalyticsQuery>): TraceDetail {
  const from = q.from ?? -Infinity
  const to = q.to ?? Infinity
  const filters = q.filters ?? []
  const records: TraceRecord[] = []
  let tokenCost = 0n
  let toolCost = 0n
  let start = Infinity
  let end = -Infinity
  const agents = new Set<string>()
  for (const r of stored) {
    const row = new RowInput()
    if (!readRow(r, row) || row.time < from || row.time >= to || !passes(row.dims, filters)) continue
    const cost = BigInt(row.cost)
    const tool = (row.flags & TOOL) !== 0
    if (tool) toolCost += cost
    else tokenCost += cost
    const agent = row.dims[DIM.agent]
    if (agent !== '') agents.add(agent)
    start = Math.min(start, row.time)
    end = Math.max(end, row.duration === row.duration ? row.time + row.duration : row.time)
    const base = { id: r.id, kind: r.kind, time: row.time, agent: agent === '' ? null : agent, cost, durationMs: Number.isNaN(row.duration) ? null : row.duration, error: (row.flags & ERROR) !== 0 }
    if (tool) {
      const operation = r.body.operation
      records.push({ ...base, toolId: row.dims[DIM.toolId], ...(typeof operation === 'string' ? { operation } : {}) })
    } else {
      records.push({ ...base, provider: row.dims[DIM.provider], model: row.dims[DIM.model], tokens: tokenTotals(row.tokens) })
    }
  }
  records.sort((a, b) => a.time - b.time || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
  return {
    traceId,
    cost: tokenCost + toolCost,
    tokenCost,
    toolCost,
    completions: records.filter((r) => r.kind !== 'tool').length,
    toolEvents: records.filter((r) => r.kind === 'tool').length,
    start,
    end,
    agents: [...agents].sort(),
    records,
  }
}
