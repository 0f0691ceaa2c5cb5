import type { ClickHouseClient } from '@clickhouse/client'
import {
  byName,
  bucketsOf,
  DIMENSIONS,
  divideUnits,
  histogramBounds,
  nearestRank,
  normaliseFilter,
  PERCENTILES,
  type AgentCost,
  type AnalyticsQuery,
  type AnalyticsReader,
  type DimensionFilter,
  type Interval,
  type ProviderStats,
  type ToolBucket,
  type ToolSeries,
  type Totals,
  type TraceDistribution,
  type TraceListOptions,
  type TraceSummary,
  type TokenTotals,
} from '../../domain/analytics/index.js'
import type { UsageRecord } from '../../model/usage-record.js'
import { money, quote, tableOf, unitsOf, type ClickHouseTarget } from './table.js'

type Row = Record<string, string | number | null | string[]>

const TOKEN_SUMS = (cond: string) =>
  ['input', 'output', 'reasoning', 'cache_read', 'cache_creation', 'total'].map((k, i) => `sumIf(${k}_tokens, ${cond}) AS tok${i}`).join(', ')
const tokensOf = (r: Row): TokenTotals => ({
  input: Number(r.tok0),
  output: Number(r.tok1),
  reasoning: Number(r.tok2),
  cacheRead: Number(r.tok3),
  cacheCreation: Number(r.tok4),
  total: Number(r.tok5),
})

/** Nearest-rank percentile `p` of a sorted Float64 array column (nan when empty: JSON null). */
const rank = (arr: string, p: number) => `if(length(${arr}) = 0, nan, ${arr}[toUInt64(greatest(1, ceil(${p} * length(${arr}) / 100)))])`
const nullable = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v))

/**
 * The analytics questions answered by ClickHouse over the records table the clickhouse
 * exporter fills (table.ts). Every sum is taken over Decimal128(12) and read back as text, so
 * money is exact; percentiles are nearest rank over sorted values, as the embedded index
 * computes them; ties and orders are the embedded ones; a record repriced after it was
 * inserted counts at its latest version only (FINAL). ClickHouse 18.16 has no query
 * parameters: every value is quoted by table.ts's quote().
 */
export class ClickHouseAnalytics implements AnalyticsReader {
  /**
   * What every query reads: the table FINAL, so that of a record's rows (table.ts) only the
   * latest version counts, before parts merge as after. The WHERE conditions apply to that
   * version (ClickHouse does not move them to PREWHERE under FINAL).
   */
  private readonly table: string

  constructor(private readonly client: ClickHouseClient, target: ClickHouseTarget) {
    this.table = `${tableOf(target)} FINAL`
  }

  async totals(team: string, q: AnalyticsQuery): Promise<Totals> {
    const [r] = await this.rows(
      `SELECT toString(sumIf(cost, is_tool = 0)) AS tokenCostText, toString(sumIf(cost, is_tool = 1)) AS toolCostText,
        countIf(is_tool = 0) AS completions, countIf(is_tool = 1) AS toolEvents, countIf(error = 1) AS errors,
        ${TOKEN_SUMS('is_tool = 0')}, uniqExactIf(trace_id, trace_id != '') AS traces,
        arraySort(groupArrayIf(duration_ms, is_tool = 0 AND NOT isNaN(duration_ms))) AS lat, ${rank('lat', 50)} AS p50, ${rank('lat', 95)} AS p95
       FROM ${this.table} WHERE ${where(team, q)}`,
    )
    const tokenCost = unitsOf(String(r.tokenCostText))
    const toolCost = unitsOf(String(r.toolCostText))
    const completions = Number(r.completions)
    const toolEvents = Number(r.toolEvents)
    const records = completions + toolEvents
    const errors = Number(r.errors)
    return {
      cost: tokenCost + toolCost,
      tokenCost,
      toolCost,
      completions,
      toolEvents,
      records,
      errors,
      errorRate: records === 0 ? 0 : errors / records,
      tokens: tokensOf(r),
      traces: Number(r.traces),
      latencyMs: { p50: nullable(r.p50), p95: nullable(r.p95) },
    }
  }

  async agentsCost(team: string, q: AnalyticsQuery): Promise<AgentCost[]> {
    const rows = await this.rows(
      `SELECT agent, toString(sumIf(cost, is_tool = 0)) AS tokenCostText, toString(sumIf(cost, is_tool = 1)) AS toolCostText,
        countIf(is_tool = 0) AS completions, countIf(is_tool = 1) AS toolEvents, ${TOKEN_SUMS('is_tool = 0')}
       FROM ${this.table} WHERE ${where(team, q)} GROUP BY agent`,
    )
    const out = rows.map((r): AgentCost => {
      const tokenCost = unitsOf(String(r.tokenCostText))
      const toolCost = unitsOf(String(r.toolCostText))
      return {
        agent: r.agent === '' ? null : String(r.agent),
        tokenCost,
        toolCost,
        totalCost: tokenCost + toolCost,
        completions: Number(r.completions),
        toolEvents: Number(r.toolEvents),
        tokens: tokensOf(r),
      }
    })
    return out.sort((x, y) => (x.totalCost === y.totalCost ? byName(x.agent, y.agent) : x.totalCost > y.totalCost ? -1 : 1))
  }

  async toolsCostOverTime(team: string, q: AnalyticsQuery, interval: Interval): Promise<ToolSeries[]> {
    const { start, count, width } = bucketsOf(q.from, q.to, interval)
    const rows = await this.rows(
      `SELECT toolId, intDiv(time_ms - ${start}, ${width}) AS k, toString(sum(cost)) AS costText, count() AS events, countIf(error = 1) AS errors,
        sumIf(duration_ms, NOT isNaN(duration_ms)) AS durations, countIf(NOT isNaN(duration_ms)) AS timed
       FROM ${this.table} WHERE ${where(team, q)} AND is_tool = 1 AND toolId != '' GROUP BY toolId, k`,
    )
    const tools = new Map<string, ToolSeries>()
    for (const r of rows) {
      const id = String(r.toolId)
      let t = tools.get(id)
      if (t === undefined) {
        const buckets = Array.from({ length: count }, (_, x): ToolBucket => ({ start: start + x * width, cost: 0n, events: 0, errors: 0, meanDurationMs: null }))
        tools.set(id, (t = { toolId: id, cost: 0n, events: 0, errors: 0, buckets }))
      }
      const b = t.buckets[Number(r.k)]
      b.cost = unitsOf(String(r.costText))
      b.events = Number(r.events)
      b.errors = Number(r.errors)
      b.meanDurationMs = Number(r.timed) > 0 ? Number(r.durations) / Number(r.timed) : null
      t.cost += b.cost
      t.events += b.events
      t.errors += b.errors
    }
    return [...tools.values()].sort((x, y) => (x.cost === y.cost ? (x.toolId < y.toolId ? -1 : 1) : x.cost > y.cost ? -1 : 1))
  }

  async traceCostDistribution(team: string, q: AnalyticsQuery, opts: { threshold?: bigint; buckets?: number }): Promise<TraceDistribution> {
    const traces = `(SELECT trace_id, sum(cost) AS c FROM ${this.table} WHERE ${where(team, q)} AND trace_id != '' GROUP BY trace_id)`
    const threshold = opts.threshold ?? null
    const [s] = await this.rows(
      `SELECT count() AS n, toString(sum(c)) AS total, toString(min(c)) AS min, toString(max(c)) AS max
        ${threshold === null ? '' : `, countIf(c > ${money(threshold)}) AS above`} FROM ${traces}`,
    )
    const n = Number(s.n)
    const total = n === 0 ? 0n : unitsOf(String(s.total))
    const empty = { p50: null, p90: null, p95: null, p99: null }
    if (n === 0)
      return { count: 0, total, min: null, max: null, mean: null, percentiles: empty, histogram: { bounds: [], counts: [] }, threshold, above: threshold === null ? null : { count: 0, share: 0 } }
    const min = unitsOf(String(s.min))
    const max = unitsOf(String(s.max))
    // Nearest rank: the trace cost at each rank, by ORDER BY … LIMIT 1 OFFSET rank − 1 (18.16
    // cannot sort arrays of Decimal128).
    const ranks = [...new Set(PERCENTILES.map((p) => nearestRank(p, n) - 1))]
    const at = await this.rows(ranks.map((k) => `SELECT ${k} AS k, toString(c) AS v FROM ${traces} ORDER BY c LIMIT 1 OFFSET ${k}`).join(' UNION ALL '))
    const byRank = new Map(at.map((r) => [Number(r.k), unitsOf(String(r.v))]))
    const percentiles = Object.fromEntries(PERCENTILES.map((p) => [`p${p}`, byRank.get(nearestRank(p, n) - 1)!])) as TraceDistribution['percentiles']
    const bounds = histogramBounds(min, max, opts.buckets ?? 20)
    const counted = bounds.slice(0, -1).map((b, k) => `countIf(c >= ${money(b)} AND c < ${money(bounds[k + 1])})`)
    const [h] = await this.rows(`SELECT [${counted.join(', ')}] AS counts FROM ${traces}`)
    const above = threshold === null ? null : { count: Number(s.above), share: Number(s.above) / n }
    return { count: n, total, min, max, mean: divideUnits(total, n), percentiles, histogram: { bounds, counts: (h.counts as string[]).map(Number) }, threshold, above }
  }

  async traceList(team: string, q: AnalyticsQuery, o: TraceListOptions): Promise<{ total: number; traces: TraceSummary[] }> {
    const having = o.minCost === undefined ? '' : `HAVING c >= ${money(o.minCost)}`
    const traces = `(SELECT trace_id, sum(cost) AS c, toString(c) AS costText, toString(sumIf(cost, is_tool = 0)) AS tokenCostText, toString(sumIf(cost, is_tool = 1)) AS toolCostText,
        countIf(is_tool = 0) AS completions, countIf(is_tool = 1) AS toolEvents, min(time_ms) AS first,
        max(time_ms + if(isNaN(duration_ms), 0, duration_ms)) AS last, groupUniqArrayIf(agent, agent != '') AS agentList
       FROM ${this.table} WHERE ${where(team, q)} AND trace_id != '' GROUP BY trace_id ${having})`
    const dir = o.order === 'desc' ? 'DESC' : 'ASC'
    const [[n], page] = await Promise.all([
      this.rows(`SELECT count() AS n FROM ${traces}`),
      this.rows(
        `SELECT trace_id, costText, tokenCostText, toolCostText, completions, toolEvents, first, last, agentList FROM ${traces}
         ORDER BY ${o.sort === 'time' ? 'first' : 'c'} ${dir}, trace_id ASC LIMIT ${o.size} OFFSET ${o.page * o.size}`,
      ),
    ])
    return {
      total: Number(n.n),
      traces: page.map((r) => ({
        traceId: String(r.trace_id),
        cost: unitsOf(String(r.costText)),
        tokenCost: unitsOf(String(r.tokenCostText)),
        toolCost: unitsOf(String(r.toolCostText)),
        completions: Number(r.completions),
        toolEvents: Number(r.toolEvents),
        start: Number(r.first),
        end: Number(r.last),
        agents: (r.agentList as string[]).slice().sort(),
      })),
    }
  }

  async traceRecords(team: string, traceId: string): Promise<UsageRecord[]> {
    const rows = await this.rows(`SELECT record FROM ${this.table} WHERE team = ${quote(team)} AND trace_id = ${quote(traceId)}`)
    // FINAL: one row per record, its latest version.
    const seen = new Map<string, UsageRecord>()
    for (const r of rows) {
      const rec = JSON.parse(String(r.record)) as UsageRecord
      seen.set(rec.id, rec)
    }
    return [...seen.values()]
  }

  async providerStats(team: string, q: AnalyticsQuery, by: 'provider' | 'model'): Promise<ProviderStats[]> {
    const group = by === 'provider' ? 'provider' : 'provider, model'
    const rows = await this.rows(
      `SELECT ${group}, toString(sum(cost)) AS costText, count() AS requests, countIf(error = 1) AS errors, ${TOKEN_SUMS('1')},
        arraySort(groupArrayIf(duration_ms, NOT isNaN(duration_ms))) AS lat, ${rank('lat', 50)} AS lp50, ${rank('lat', 95)} AS lp95,
        arraySort(groupArrayIf(ttft_ms, NOT isNaN(ttft_ms))) AS ttft, ${rank('ttft', 50)} AS tp50, ${rank('ttft', 95)} AS tp95
       FROM ${this.table} WHERE ${where(team, q)} AND is_tool = 0 GROUP BY ${group}`,
    )
    const out = rows.map((r): ProviderStats => {
      const requests = Number(r.requests)
      const errors = Number(r.errors)
      return {
        provider: String(r.provider),
        ...(by === 'model' ? { model: String(r.model) } : {}),
        cost: unitsOf(String(r.costText)),
        requests,
        errors,
        errorRate: errors / requests,
        tokens: tokensOf(r),
        latencyMs: { p50: nullable(r.lp50), p95: nullable(r.lp95) },
        timeToFirstTokenMs: { p50: nullable(r.tp50), p95: nullable(r.tp95) },
      }
    })
    const name = (s: ProviderStats) => `${s.provider}\u0000${s.model ?? ''}`
    return out.sort((x, y) => (x.cost === y.cost ? (name(x) < name(y) ? -1 : 1) : x.cost > y.cost ? -1 : 1))
  }

  private async rows(query: string): Promise<Row[]> {
    const res = await this.client.query({ query, format: 'JSONEachRow' })
    return (await res.json()) as Row[]
  }
}

/** The records a query selects: the team's counted records in [from, to) that pass every filter. */
function where(team: string, q: AnalyticsQuery): string {
  const parts = [`team = ${quote(team)}`, 'counted = 1']
  if (Number.isFinite(q.from)) parts.push(`time_ms >= ${Math.ceil(q.from)}`)
  if (Number.isFinite(q.to)) parts.push(`time_ms < ${Math.ceil(q.to)}`)
  for (const f of q.filters) parts.push(filterSql(f))
  return parts.join(' AND ')
}

function filterSql(f: DimensionFilter): string {
  if (!(DIMENSIONS as readonly string[]).includes(f.dimension)) throw new Error(`unknown dimension ${f.dimension}`)
  const col = f.dimension
  const v = quote(normaliseFilter(f.dimension, f.value))
  // A record that does not give the dimension ('') never passes a filter on it.
  switch (f.op) {
    case 'contains':
      return `(${col} != '' AND position(${col}, ${v}) > 0)`
    case 'startsWith':
      return `(${col} != '' AND startsWith(${col}, ${v}))`
    case 'endsWith':
      return `(${col} != '' AND endsWith(${col}, ${v}))`
    default:
      return `(${col} != '' AND ${col} = ${v})`
  }
}
