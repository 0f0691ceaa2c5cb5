/**
 * Shared set-up of the analytics tests (not a test itself): seed records described in plain
 * terms, post them through the real metering endpoints, and a reference that computes every
 * analytics answer from the seed list alone (decimal.js, sorting, the nearest-rank formula
 * written out), independent of src/domain/analytics.
 */
import { Decimal } from 'decimal.js'
import { call, type Meterd } from './meterd.js'

export const API = '/profitstream/v2/api'
export const ANALYTICS = `${API}/analytics`

export interface Tokens {
  input: number
  output: number
  reasoning: number
  cacheRead: number
  cacheCreation: number
  total: number
}

export interface SeedRecord {
  kind: 'completion' | 'tool'
  /** ISO event time. */
  time: string
  /** USD as the client sends it (totalCost / costUsd); tools not registered are stored unpriced, at 0. */
  cost: string
  traceId?: string
  agent?: string
  org?: string
  product?: string
  subscriber?: string
  env?: string
  provider?: string
  model?: string
  toolId?: string
  durationMs?: number
  /** Completions: sent as timeToFirstToken when `sendTtft`, else implied by completionStartTime. */
  ttft?: number
  sendTtft?: boolean
  error?: boolean
  tokens?: Tokens
}

let seq = 0
const RUN = `${process.pid}-${Date.now()}`

export function bodyOf(s: SeedRecord): Record<string, unknown> {
  const t = Date.parse(s.time)
  const common: Record<string, unknown> = {
    transactionId: `an-${RUN}-${seq++}`,
    ...(s.traceId ? { traceId: s.traceId } : {}),
    ...(s.agent ? { agent: s.agent } : {}),
    ...(s.org ? { organizationName: s.org } : {}),
    ...(s.product ? { productName: s.product } : {}),
    ...(s.env ? { environment: s.env } : {}),
  }
  if (s.kind === 'tool') {
    return {
      ...common,
      toolId: s.toolId,
      timestamp: s.time,
      ...(s.durationMs !== undefined ? { durationMs: s.durationMs } : {}),
      success: !s.error,
      costUsd: Number(s.cost),
      ...(s.subscriber ? { subscriber: { id: s.subscriber } } : {}),
    }
  }
  const tok = s.tokens ?? { input: 0, output: 0, reasoning: 0, cacheRead: 0, cacheCreation: 0, total: 0 }
  const duration = s.durationMs ?? 0
  return {
    ...common,
    model: s.model ?? 'gpt-4o-mini',
    provider: s.provider ?? 'OpenAI',
    inputTokenCount: tok.input,
    outputTokenCount: tok.output,
    reasoningTokenCount: tok.reasoning,
    cacheReadTokenCount: tok.cacheRead,
    cacheCreationTokenCount: tok.cacheCreation,
    totalTokenCount: tok.total,
    stopReason: s.error ? 'ERROR' : 'END',
    requestTime: s.time,
    completionStartTime: new Date(t + (s.sendTtft ? 0 : (s.ttft ?? 0))).toISOString(),
    responseTime: new Date(t + duration).toISOString(),
    requestDuration: duration,
    ...(s.sendTtft && s.ttft !== undefined ? { timeToFirstToken: s.ttft } : {}),
    isStreamed: false,
    costType: 'AI',
    totalCost: Number(s.cost),
    ...(s.subscriber ? { subscriber: { id: s.subscriber } } : {}),
  }
}

/** Posts the records as batches through the metering endpoints; every answer must be a 201. */
export async function seed(m: { url: string }, key: string, records: SeedRecord[]): Promise<void> {
  for (const kind of ['completion', 'tool'] as const) {
    const bodies = records.filter((r) => r.kind === kind).map(bodyOf)
    for (let i = 0; i < bodies.length; i += 250) {
      const path = kind === 'completion' ? '/meter/v2/ai/completions' : '/meter/v2/tool/events'
      const res = await call(m.url + path, { key, body: bodies.slice(i, i + 250) })
      if (res.status !== 201) throw new Error(`seed: ${res.status} ${res.text}`)
    }
  }
}

export async function registerTool(m: Meterd | { url: string }, key: string, toolId: string): Promise<void> {
  const res = await call(`${m.url}${API}/tools`, {
    key,
    body: { toolId, name: toolId, toolType: 'REST_API', pricing: { currency: 'USD', elements: [{ name: 'calls', aggregationType: 'COUNT', unitPrice: '0.001' }] } },
  })
  if (res.status !== 201) throw new Error(`tool ${toolId}: ${res.status} ${res.text}`)
}

// ---------------------------------------------------------------------------------------------
// The reference: every answer computed from the seed list, the obvious way.

export interface Query {
  from: string
  to: string
  filters?: Partial<Record<'organizationName' | 'productName' | 'subscriberId' | 'agent' | 'provider' | 'model' | 'toolId' | 'environment', string>>
}

const ZERO = new Decimal(0)
const d = (v: string) => new Decimal(v)

/** The cost a record was stored with: tools nobody registered are stored unpriced, at 0. */
export function storedCost(s: SeedRecord, registered: ReadonlySet<string>): Decimal {
  return s.kind === 'tool' && !registered.has(s.toolId!) ? ZERO : d(s.cost)
}

export function select(records: SeedRecord[], q: Query): SeedRecord[] {
  const from = Date.parse(q.from)
  const to = Date.parse(q.to)
  return records.filter((s) => {
    const t = Date.parse(s.time)
    if (t < from || t >= to) return false
    for (const [k, v] of Object.entries(q.filters ?? {})) {
      const have =
        k === 'organizationName' ? s.org : k === 'productName' ? s.product : k === 'subscriberId' ? s.subscriber : k === 'environment' ? s.env : k === 'toolId' ? (s.kind === 'tool' ? s.toolId : undefined) : k === 'provider' ? (s.kind === 'completion' ? (s.provider ?? 'OpenAI') : undefined) : k === 'model' ? (s.kind === 'completion' ? (s.model ?? 'gpt-4o-mini') : undefined) : s.agent
      if (k === 'provider' ? have?.toLowerCase() !== v.toLowerCase() : have !== v) return false
    }
    return true
  })
}

export function refAgents(sel: SeedRecord[], reg: ReadonlySet<string>) {
  const by = new Map<string | null, { tokenCost: Decimal; toolCost: Decimal; completions: number; toolEvents: number; tokens: number }>()
  for (const s of sel) {
    const k = s.agent ?? null
    const g = by.get(k) ?? { tokenCost: ZERO, toolCost: ZERO, completions: 0, toolEvents: 0, tokens: 0 }
    if (s.kind === 'tool') {
      g.toolCost = g.toolCost.plus(storedCost(s, reg))
      g.toolEvents++
    } else {
      g.tokenCost = g.tokenCost.plus(storedCost(s, reg))
      g.completions++
      g.tokens += s.tokens?.total ?? 0
    }
    by.set(k, g)
  }
  return by
}

/** Trace id → its selected records' cost. */
export function refTraceCosts(sel: SeedRecord[], reg: ReadonlySet<string>): Map<string, Decimal> {
  const m = new Map<string, Decimal>()
  for (const s of sel) if (s.traceId) m.set(s.traceId, (m.get(s.traceId) ?? ZERO).plus(storedCost(s, reg)))
  return m
}

/** Nearest rank, written out: the smallest value such that at least p % of the values are no greater. */
export function refPercentile(sortedAsc: Decimal[], p: number): Decimal | null {
  const n = sortedAsc.length
  if (n === 0) return null
  for (let r = 1; r <= n; r++) if (r * 100 >= p * n) return sortedAsc[r - 1]
  return sortedAsc[n - 1]
}

export function refNumberPercentile(values: number[], p: number): number | null {
  const s = [...values].sort((a, b) => a - b)
  const n = s.length
  if (n === 0) return null
  for (let r = 1; r <= n; r++) if (r * 100 >= p * n) return s[r - 1]
  return s[n - 1]
}

export function refDistribution(sel: SeedRecord[], reg: ReadonlySet<string>, threshold?: string) {
  const costs = [...refTraceCosts(sel, reg).values()].sort((a, b) => a.comparedTo(b))
  const n = costs.length
  const total = costs.reduce((a, b) => a.plus(b), ZERO)
  const above = threshold === undefined ? null : costs.filter((c) => c.gt(threshold)).length
  return {
    count: n,
    total,
    min: costs[0] ?? null,
    max: costs[n - 1] ?? null,
    mean: n ? total.div(n).toDecimalPlaces(12, Decimal.ROUND_HALF_EVEN) : null,
    p50: refPercentile(costs, 50),
    p90: refPercentile(costs, 90),
    p95: refPercentile(costs, 95),
    p99: refPercentile(costs, 99),
    above,
    costs,
  }
}

export function refProviders(sel: SeedRecord[], reg: ReadonlySet<string>, by: 'provider' | 'model') {
  const m = new Map<string, { provider: string; model?: string; cost: Decimal; requests: number; errors: number; input: number; total: number; latency: number[]; ttft: number[] }>()
  for (const s of sel) {
    if (s.kind !== 'completion') continue
    const provider = (s.provider ?? 'OpenAI').toLowerCase()
    const model = s.model ?? 'gpt-4o-mini'
    const key = by === 'provider' ? provider : `${provider}/${model}`
    const g = m.get(key) ?? { provider, ...(by === 'model' ? { model } : {}), cost: ZERO, requests: 0, errors: 0, input: 0, total: 0, latency: [], ttft: [] }
    g.cost = g.cost.plus(storedCost(s, reg))
    g.requests++
    if (s.error) g.errors++
    g.input += s.tokens?.input ?? 0
    g.total += s.tokens?.total ?? 0
    g.latency.push(s.durationMs ?? 0)
    if (s.ttft) g.ttft.push(s.ttft)
    m.set(key, g)
  }
  return m
}

export function refTotals(sel: SeedRecord[], reg: ReadonlySet<string>) {
  let tokenCost = ZERO
  let toolCost = ZERO
  let completions = 0
  let toolEvents = 0
  let errors = 0
  let tokens = 0
  const traces = new Set<string>()
  for (const s of sel) {
    if (s.kind === 'tool') (toolCost = toolCost.plus(storedCost(s, reg))), toolEvents++
    else (tokenCost = tokenCost.plus(storedCost(s, reg))), completions++, (tokens += s.tokens?.total ?? 0)
    if (s.error) errors++
    if (s.traceId) traces.add(s.traceId)
  }
  return { cost: tokenCost.plus(toolCost), tokenCost, toolCost, completions, toolEvents, errors, tokens, traces: traces.size }
}

/** GET an analytics endpoint; the query object becomes the query string. */
export async function get(m: { url: string }, key: string, path: string, query: Record<string, string | number | undefined> = {}) {
  const qs = new URLSearchParams(Object.entries(query).filter(([, v]) => v !== undefined).map(([k, v]) => [k, String(v)])).toString()
  return call(`${m.url}${ANALYTICS}/${path}${qs ? `?${qs}` : ''}`, { key })
}

export const eq = (api: string | null, ref: Decimal | null): boolean => (api === null || ref === null ? api === ref : /^-?\d+(\.\d+)?$/.test(api) && new Decimal(api).eq(ref))

/** A 200, or a failure that shows the answer. */
export function ok200(t: { pass(m: string): void; fail(m: string): void }, res: { status: number; text: string }): void {
  if (res.status === 200) t.pass('200')
  else t.fail(`answered ${res.status}: ${res.text}`)
}
