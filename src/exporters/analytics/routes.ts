import type { Host } from '../../host/component.js'
import { ApiError, invalid, notFound } from '../../core/errors.js'
import {
  bucketsOf,
  formatUnits,
  INTERVALS,
  traceDetail,
  type AgentCost,
  type AnalyticsReader,
  type Interval,
  type Totals,
} from '../../domain/analytics/index.js'
import { paging } from '../../transport/http/query.js'
import type { Reply, RequestContext } from '../../transport/http/server.js'
import { amount, choice, integer, readQuery, type ReadQuery } from './params.js'

export interface RouteOptions {
  maxBuckets: number
}

/**
 * A time as ISO text; null when unknown or past what a Date holds (±8.64e15 ms): a stored tool
 * event with durationMs 1e300, accepted by REST and OTLP, put its trace's end there, and
 * toISOString's RangeError made every traces answer of the team a 503.
 */
const iso = (ms: number): string | null => (Number.isFinite(ms) && Math.abs(ms) <= 8.64e15 ? new Date(ms).toISOString() : null)
const money = formatUnits

function head(q: ReadQuery) {
  return { teamId: q.team, from: iso(q.from), to: iso(q.to), filters: q.given }
}

const AGENT_SORTS = ['totalCost', 'tokenCost', 'toolCost', 'completions', 'toolEvents', 'tokens', 'agent'] as const

/**
 * The analytics read endpoints (DESIGN §8) under /{api_prefix}/v2/api/analytics/: the analytics
 * bucket, scope analytics:read, always the key's team.
 */
export function mountAnalyticsRoutes(host: Host, analytics: { readonly ready: boolean }, reader: AnalyticsReader, o: RouteOptions): void {
  const base = `/${host.server.api_prefix}/v2/api/analytics`
  const get = (path: string, handler: (ctx: RequestContext) => Reply | Promise<Reply>) =>
    host.http.route({
      method: 'GET',
      path: `${base}/${path}`,
      bucket: 'analytics',
      scope: 'analytics:read',
      handler: (ctx) => {
        if (!analytics.ready)
          throw new ApiError(503, 'api_error', 'analytics_loading', 'analytics is still reading the stored records after a start; retry shortly', { headers: { 'Retry-After': '1' } })
        return handler(ctx)
      },
    })
  get('agents/cost', async (ctx) => {
    const q = readQuery(ctx, host.now(), ['sort', 'order'])
    const sort = choice(ctx, 'sort', AGENT_SORTS, 'totalCost')
    const order = choice(ctx, 'order', ['asc', 'desc'], sort === 'agent' ? 'asc' : 'desc')
    const agents = sortAgents(await reader.agentsCost(q.team, q), sort, order)
    const sum = (f: (a: AgentCost) => bigint) => agents.reduce((s, a) => s + f(a), 0n)
    return {
      status: 200,
      body: {
        ...head(q),
        sort,
        order,
        agents: agents.map((a) => ({
          agent: a.agent,
          tokenCost: money(a.tokenCost),
          toolCost: money(a.toolCost),
          totalCost: money(a.totalCost),
          completions: a.completions,
          toolEvents: a.toolEvents,
          tokens: a.tokens,
        })),
        totals: {
          tokenCost: money(sum((a) => a.tokenCost)),
          toolCost: money(sum((a) => a.toolCost)),
          totalCost: money(sum((a) => a.totalCost)),
          completions: agents.reduce((s, a) => s + a.completions, 0),
          toolEvents: agents.reduce((s, a) => s + a.toolEvents, 0),
        },
      },
    }
  })

  get('tools/cost-over-time', async (ctx) => {
    const q = readQuery(ctx, host.now(), ['interval'])
    const interval = choice<Interval>(ctx, 'interval', Object.keys(INTERVALS) as Interval[], 'hour')
    const { start, count, width } = bucketsOf(q.from, q.to, interval)
    if (count > o.maxBuckets)
      throw invalid('invalid_parameter', `from..to by ${interval} is ${count} buckets, more than ${o.maxBuckets}: choose a longer interval or a shorter period`, 'interval')
    const tools = await reader.toolsCostOverTime(q.team, q, interval)
    return {
      status: 200,
      body: {
        ...head(q),
        interval,
        buckets: Array.from({ length: count }, (_, i) => iso(start + i * width)),
        tools: tools.map((t) => ({
          toolId: t.toolId,
          cost: money(t.cost),
          events: t.events,
          errors: t.errors,
          series: t.buckets.map((b) => ({ start: iso(b.start), cost: money(b.cost), events: b.events, errors: b.errors, meanDurationMs: b.meanDurationMs })),
        })),
      },
    }
  })

  get('traces/cost-distribution', async (ctx) => {
    const q = readQuery(ctx, host.now(), ['threshold', 'buckets'])
    const threshold = amount(ctx, 'threshold')
    const buckets = integer(ctx, 'buckets', 1, 100, 20)
    const d = await reader.traceCostDistribution(q.team, q, { threshold, buckets })
    const m = (v: bigint | null) => (v === null ? null : money(v))
    return {
      status: 200,
      body: {
        ...head(q),
        count: d.count,
        total: money(d.total),
        min: m(d.min),
        max: m(d.max),
        mean: m(d.mean),
        percentiles: { p50: m(d.percentiles.p50), p90: m(d.percentiles.p90), p95: m(d.percentiles.p95), p99: m(d.percentiles.p99) },
        histogram: { bounds: d.histogram.bounds.map(money), counts: d.histogram.counts },
        threshold: m(d.threshold),
        above: d.above,
      },
    }
  })

  get('traces', async (ctx) => {
    const q = readQuery(ctx, host.now(), ['sort', 'order', 'minCost', 'page', 'size'])
    const sort = choice(ctx, 'sort', ['cost', 'time'], 'cost')
    const order = choice(ctx, 'order', ['asc', 'desc'], 'desc')
    const minCost = amount(ctx, 'minCost')
    const { page, size } = paging(ctx)
    const { total, traces } = await reader.traceList(q.team, q, { sort, order, minCost, page, size })
    return {
      status: 200,
      body: {
        ...head(q),
        sort,
        order,
        minCost: minCost === undefined ? null : money(minCost),
        traces: traces.map((t) => ({
          traceId: t.traceId,
          cost: money(t.cost),
          tokenCost: money(t.tokenCost),
          toolCost: money(t.toolCost),
          completions: t.completions,
          toolEvents: t.toolEvents,
          start: iso(t.start),
          end: iso(t.end),
          durationMs: t.end - t.start,
          agents: t.agents,
        })),
        page: { size, totalElements: total, totalPages: Math.ceil(total / size), number: page },
      },
    }
  })

  get('traces/:traceId', async (ctx) => {
    const q = readQuery(ctx, host.now(), [], { whole: true })
    const traceId = ctx.params.traceId
    const stored = await reader.traceRecords(q.team, traceId)
    if (stored.length === 0) throw notFound(`no trace ${traceId} in this team`, 'traceId')
    const t = traceDetail(traceId, stored, q)
    const empty = t.records.length === 0
    return {
      status: 200,
      body: {
        ...head(q),
        traceId,
        cost: money(t.cost),
        tokenCost: money(t.tokenCost),
        toolCost: money(t.toolCost),
        completions: t.completions,
        toolEvents: t.toolEvents,
        start: empty ? null : iso(t.start),
        end: empty ? null : iso(t.end),
        durationMs: empty ? null : t.end - t.start,
        agents: t.agents,
        records: t.records.map((r) => ({
          id: r.id,
          kind: r.kind,
          eventTime: iso(r.time),
          agent: r.agent,
          ...(r.kind === 'completion' ? { provider: r.provider, model: r.model } : { toolId: r.toolId, ...(r.operation !== undefined ? { operation: r.operation } : {}) }),
          cost: money(r.cost),
          durationMs: r.durationMs,
          error: r.error,
          ...(r.tokens ? { tokens: r.tokens } : {}),
        })),
      },
    }
  })

  for (const by of ['provider', 'model'] as const) {
    get(`${by}s`, async (ctx) => {
      const q = readQuery(ctx, host.now(), [])
      const stats = await reader.providerStats(q.team, q, by)
      return { status: 200, body: { ...head(q), [`${by}s`]: stats.map((s) => ({ ...s, cost: money(s.cost) })) } }
    })
  }

  get('summary', async (ctx) => {
    const q = readQuery(ctx, host.now(), [])
    const length = q.to - q.from
    const previous = { ...q, from: q.from - length, to: q.from }
    const [now, before] = await Promise.all([reader.totals(q.team, q), reader.totals(q.team, previous)])
    const percent = before.cost === 0n ? null : (Number(((now.cost - before.cost) * 1_000_000n) / before.cost) / 10_000)
    return {
      status: 200,
      body: {
        teamId: q.team,
        filters: q.given,
        period: { from: iso(q.from), to: iso(q.to), ...renderTotals(now) },
        previousPeriod: { from: iso(previous.from), to: iso(previous.to), ...renderTotals(before) },
        change: { cost: signed(now.cost - before.cost), costPercent: percent, records: now.records - before.records },
      },
    }
  })
}

function renderTotals(t: Totals) {
  return { ...t, cost: money(t.cost), tokenCost: money(t.tokenCost), toolCost: money(t.toolCost) }
}

const signed = (units: bigint): string => (units > 0n ? '+' : '') + money(units)

function sortAgents(agents: AgentCost[], sort: (typeof AGENT_SORTS)[number], order: 'asc' | 'desc'): AgentCost[] {
  const dir = order === 'asc' ? 1 : -1
  const name = (a: AgentCost) => a.agent ?? '\uffff' // the no-agent group after every name
  const key = (a: AgentCost): bigint | number | string => (sort === 'agent' ? name(a) : sort === 'tokens' ? a.tokens.total : a[sort])
  return agents.sort((a, b) => {
    const x = key(a)
    const y = key(b)
    if (x !== y) return (x < y ? -1 : 1) * dir
    return name(a) < name(b) ? -1 : name(a) > name(b) ? 1 : 0
  })
}
