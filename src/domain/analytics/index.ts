/**
 * Analytics over committed usage records (DESIGN §8), kept in memory by the `analytics`
 * exporter and answered from there: the model (AnalyticsIndex, TeamIndex), the query
 * functions (one pass over the rows of a time range each), exact money in units of 10^-12 USD
 * and nearest-rank percentiles. A component reaches a running daemon's analytics through
 * `findAnalytics(host.store)`; see docs/analytics.md.
 */
export { AnalyticsIndex } from './analytics-index.js'
export type { TeamIndex } from './team-index.js'
export { DIMENSIONS, FILTER_OPS, normalise as normaliseFilter, type Dimension, type DimensionFilter, type FilterOp } from './dimensions.js'
export type { AnalyticsQuery, TokenTotals } from './query.js'
export { findAnalytics, publishAnalytics, withdrawAnalytics, type Analytics } from './registry.js'
export { formatUnits, parseUnits, divideUnits } from './units.js'
export type { AnalyticsReader } from './reader.js'
export { nearestRank } from './rank.js'
export { agentsCost, byName, type AgentCost } from './queries/agents.js'
export { toolsCostOverTime, bucketsOf, INTERVALS, type Interval, type ToolSeries, type ToolBucket } from './queries/tools.js'
export { traceCostDistribution, histogramBounds, PERCENTILES, type TraceDistribution } from './queries/distribution.js'
export { traceList, type TraceSummary, type TraceListOptions } from './queries/traces.js'
export { traceDetail, type TraceDetail, type TraceRecord } from './queries/trace-detail.js'
export { providerStats, type ProviderStats, type Percentiles } from './queries/providers.js'
export { totals, type Totals } from './queries/totals.js'
