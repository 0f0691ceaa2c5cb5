import type { UsageRecord } from '../../model/usage-record.js'
import type { AnalyticsQuery } from './query.js'
import type { AgentCost } from './queries/agents.js'
import type { TraceDistribution } from './queries/distribution.js'
import type { ProviderStats } from './queries/providers.js'
import type { Interval, ToolSeries } from './queries/tools.js'
import type { Totals } from './queries/totals.js'
import type { TraceListOptions, TraceSummary } from './queries/traces.js'

/**
 * The analytics questions, asked of one team, whatever answers them: the in-memory index
 * (src/exporters/analytics/embedded.ts) or ClickHouse (src/adapters/clickhouse/analytics.ts).
 * Both give the same answers on the same records (test/clickhouse/agree.test.ts); the
 * endpoints only render them.
 */
export interface AnalyticsReader {
  agentsCost(team: string, q: AnalyticsQuery): Promise<AgentCost[]>
  toolsCostOverTime(team: string, q: AnalyticsQuery, interval: Interval): Promise<ToolSeries[]>
  traceCostDistribution(team: string, q: AnalyticsQuery, opts: { threshold?: bigint; buckets?: number }): Promise<TraceDistribution>
  traceList(team: string, q: AnalyticsQuery, o: TraceListOptions): Promise<{ total: number; traces: TraceSummary[] }>
  /** Every stored record of the trace (all kinds, counted or not): the trace detail reads them whole. */
  traceRecords(team: string, traceId: string): Promise<UsageRecord[]>
  providerStats(team: string, q: AnalyticsQuery, by: 'provider' | 'model'): Promise<ProviderStats[]>
  totals(team: string, q: AnalyticsQuery): Promise<Totals>
}
