import type { Host } from '../../host/component.js'
import {
  agentsCost,
  providerStats,
  toolsCostOverTime,
  totals,
  traceCostDistribution,
  traceList,
  type AnalyticsIndex,
  type AnalyticsReader,
} from '../../domain/analytics/index.js'
import { USAGE_KINDS, type UsageKind, type UsageRecord } from '../../model/usage-record.js'

/** The analytics questions answered from the in-memory index, and a trace's records from the store. */
export function embeddedReader(host: Host, index: AnalyticsIndex): AnalyticsReader {
  return {
    agentsCost: async (team, q) => agentsCost(index.team(team), q),
    toolsCostOverTime: async (team, q, interval) => toolsCostOverTime(index.team(team), q, interval),
    traceCostDistribution: async (team, q, opts) => traceCostDistribution(index.team(team), q, opts),
    traceList: async (team, q, o) => traceList(index.team(team), q, o),
    traceRecords: async (team, traceId) => USAGE_KINDS.flatMap((kind) => traceRecords(host, team, traceId, kind)),
    providerStats: async (team, q, by) => providerStats(index.team(team), q, by),
    totals: async (team, q) => totals(index.team(team), q),
  }
}

/** Every stored record of one trace and kind, from the store's traceId index. */
function traceRecords(host: Host, team: string, traceId: string, kind: UsageKind): UsageRecord[] {
  const out: UsageRecord[] = []
  for (let page = 0; ; page++) {
    const { records, total } = host.usage.list({ team, kind, traceId, page, size: 1000 })
    out.push(...records)
    if (out.length >= total || records.length === 0) return out
  }
}
