import type { UsageRecord } from '../../model/usage-record.js'
import { Decimal, ZERO, round } from '../pricing/money.js'
import type { AlertFilter, AlertRule, FilterDimension, MetricType, Period } from './model.js'

const HOUR = 3_600_000
const DAY = 24 * HOUR

/** Sliding length of each period (THRESHOLD and RELATIVE_CHANGE windows). */
export const PERIOD_MS: Record<Period, number> = {
  ONE_HOUR: HOUR,
  DAILY: DAY,
  WEEKLY: 7 * DAY,
  MONTHLY: 30 * DAY,
  QUARTERLY: 91 * DAY,
}

export interface Window {
  from: number
  to: number
}

/**
 * The windows a rule compares at `now`: THRESHOLD the sliding window of its period (or
 * windowSeconds); CUMULATIVE_USAGE the calendar period so far, in UTC (the clock hour, day, ISO
 * week from Monday, month or quarter); RELATIVE_CHANGE the sliding window and the one before it.
 */
export function windowsOf(rule: Pick<AlertRule, 'alertType' | 'periodDuration' | 'windowSeconds'>, now: number): { current: Window; previous?: Window } {
  if (rule.alertType === 'CUMULATIVE_USAGE') return { current: { from: periodStart(rule.periodDuration, now), to: now } }
  const len = rule.windowSeconds !== null ? rule.windowSeconds * 1000 : PERIOD_MS[rule.periodDuration]
  const current = { from: now - len, to: now }
  return rule.alertType === 'RELATIVE_CHANGE' ? { current, previous: { from: now - 2 * len, to: now - len } } : { current }
}

/** Start (ms, UTC) of the calendar period that holds `now`. */
export function periodStart(period: Period, now: number): number {
  const d = new Date(now)
  const y = d.getUTCFullYear()
  const m = d.getUTCMonth()
  switch (period) {
    case 'ONE_HOUR':
      return now - (now % HOUR)
    case 'DAILY':
      return Date.UTC(y, m, d.getUTCDate())
    case 'WEEKLY': {
      const day = Date.UTC(y, m, d.getUTCDate())
      return day - ((d.getUTCDay() + 6) % 7) * DAY // back to Monday
    }
    case 'MONTHLY':
      return Date.UTC(y, m, 1)
    case 'QUARTERLY':
      return Date.UTC(y, m - (m % 3), 1)
  }
}

/** A record's value for a filter dimension ('' when it has none), lower-cased. */
function dimensionOf(r: UsageRecord, d: FilterDimension): string[] {
  const a = r.attribution
  switch (d) {
    case 'ORGANIZATION':
      return [a.organizationName]
    case 'PRODUCT':
      return [a.productName]
    case 'MODEL':
      return [r.kind === 'tool' ? '' : String(r.body.model ?? '')]
    case 'PROVIDER':
      return [r.kind === 'tool' ? '' : String(r.body.provider ?? '')]
    case 'AGENT':
      return [a.agent]
    case 'SUBSCRIBER':
      // A subscriber is named by its id or its e-mail; either matches.
      return [a.subscriberId, a.subscriberEmail]
    case 'CREDENTIAL':
      return [a.subscriberCredentialName]
    case 'TASK_TYPE':
      return [a.taskType]
    case 'ENVIRONMENT':
      return [a.environment || r.caller.environment]
    case 'TOOL':
      return [r.kind === 'tool' ? r.body.toolId : '']
  }
}

function rowMatches(f: AlertFilter, value: string): boolean {
  const v = value.toLowerCase()
  const want = f.values[0].toLowerCase()
  switch (f.operator) {
    case 'IS':
      return v === want
    case 'IS_NOT':
      return v !== want
    case 'CONTAINS':
      return v.includes(want)
    case 'STARTS_WITH':
      return v.startsWith(want)
    case 'ENDS_WITH':
      return v.endsWith(want)
    case 'IN':
      return f.values.some((x) => x.toLowerCase() === v)
  }
}

/** Every filter row holds (rows are ANDed); a row holds when any of the record's values for its dimension matches. */
export function matchesFilters(r: UsageRecord, filters: readonly AlertFilter[]): boolean {
  for (const f of filters) {
    const values = dimensionOf(r, f.dimension)
    const hit = f.operator === 'IS_NOT' ? values.every((v) => rowMatches(f, v)) : values.some((v) => v !== '' && rowMatches(f, v))
    if (!hit) return false
  }
  return true
}

/** A record that failed: a completion that stopped with ERROR or carries an errorReason, a tool event with success false. */
export function isError(r: UsageRecord): boolean {
  if (r.kind === 'tool') return r.body.success === false
  return r.body.stopReason === 'ERROR' || (typeof r.body.errorReason === 'string' && r.body.errorReason !== '')
}

const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) ? v : 0)

function tokens(r: UsageRecord): { input: number; output: number; total: number } {
  if (r.kind !== 'completion') return { input: 0, output: 0, total: 0 }
  const input = num(r.body.inputTokenCount)
  const output = num(r.body.outputTokenCount)
  // totalTokenCount as the client counted it (wire-contract §1.5); input + output when it sent none.
  const total = typeof r.body.totalTokenCount === 'number' ? r.body.totalTokenCount : input + output
  return { input, output, total }
}

/** The nearest-rank p-th percentile of ascending values: the smallest value with at least p % of values at or below it. */
export function nearestRank(sorted: readonly number[], p: number): number {
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length))
  return sorted[rank - 1]
}

/**
 * One metric over the records of one window (already narrowed to the rule's team, window and
 * filters), as a Decimal: money exactly, counts as integers, rates per minute of the window,
 * ERROR_RATE in percent, LATENCY_P95 in milliseconds; quotients rounded half-even to 12 places. Null when the metric has no value for an
 * empty set (a cost per transaction, rate or percentile of nothing).
 */
export function measure(metric: MetricType, records: readonly UsageRecord[], window: Window): Decimal | null {
  return measureSummary(metric, summarize(metric, records), window)
}

/**
 * What a metric needs of a set of records, in a form that adds up: a gateway cluster's replicas
 * each summarize their own records and the leader merges the summaries (mergeSummaries), then
 * measures the whole as if it held every record. Only what the metric uses is filled.
 */
export interface Summary {
  /** Records. */
  n: number
  /** Their cost, an exact decimal string. */
  cost: string
  tokens: { input: number; output: number; total: number }
  errors: number
  /** TRACE_COST: cost per traceId. */
  traces?: Record<string, string>
  /** LATENCY_P95: the completions' durations. */
  durations?: number[]
}

export function summarize(metric: MetricType, records: readonly UsageRecord[]): Summary {
  let cost = ZERO
  const tk = { input: 0, output: 0, total: 0 }
  let errors = 0
  for (const r of records) {
    if (r.cost) cost = cost.plus(r.cost.total)
    const t = tokens(r)
    tk.input += t.input
    tk.output += t.output
    tk.total += t.total
    if (isError(r)) errors++
  }
  const s: Summary = { n: records.length, cost: cost.toFixed(), tokens: tk, errors }
  if (metric === 'TRACE_COST') {
    // Records sharing a traceId, completions and tool events together.
    const byTrace = new Map<string, Decimal>()
    for (const r of records) {
      const t = r.attribution.traceId
      if (t) byTrace.set(t, (byTrace.get(t) ?? ZERO).plus(r.cost?.total ?? 0))
    }
    s.traces = {}
    for (const [t, c] of byTrace) s.traces[t] = c.toFixed()
  }
  if (metric === 'LATENCY_P95') s.durations = records.filter((r) => r.kind === 'completion').map((r) => num(r.body.requestDuration))
  return s
}

/** The summary of the union of the records the summaries stand for (a trace spread over replicas adds up). */
export function mergeSummaries(list: readonly Summary[]): Summary {
  let cost = ZERO
  const out: Summary = { n: 0, cost: '0', tokens: { input: 0, output: 0, total: 0 }, errors: 0 }
  let traces: Map<string, Decimal> | undefined
  for (const s of list) {
    out.n += s.n
    cost = cost.plus(s.cost)
    out.tokens.input += s.tokens.input
    out.tokens.output += s.tokens.output
    out.tokens.total += s.tokens.total
    out.errors += s.errors
    if (s.traces) {
      traces ??= new Map()
      for (const [t, c] of Object.entries(s.traces)) traces.set(t, (traces.get(t) ?? ZERO).plus(c))
    }
    if (s.durations) (out.durations ??= []).push(...s.durations)
  }
  out.cost = cost.toFixed()
  if (traces) {
    out.traces = {}
    for (const [t, c] of traces) out.traces[t] = c.toFixed()
  }
  return out
}

/** measure() of the records a summary stands for. */
export function measureSummary(metric: MetricType, s: Summary, window: Window): Decimal | null {
  const v = raw(metric, s, window)
  // Quotients are rounded like stored money (half-even, SCALE places), so values and events read cleanly.
  return v === null ? null : round(v)
}

function raw(metric: MetricType, s: Summary, window: Window): Decimal | null {
  const minutes = new Decimal(Math.max(window.to - window.from, 1)).div(60_000)
  switch (metric) {
    case 'TOTAL_COST':
      return new Decimal(s.cost)
    case 'COST_PER_TRANSACTION':
      return s.n === 0 ? null : new Decimal(s.cost).div(s.n)
    case 'TOKEN_COUNT':
      return new Decimal(s.tokens.total)
    case 'INPUT_TOKENS':
      return new Decimal(s.tokens.input)
    case 'OUTPUT_TOKENS':
      return new Decimal(s.tokens.output)
    case 'TOKENS_PER_MINUTE':
      return new Decimal(s.tokens.total).div(minutes)
    case 'REQUESTS_PER_MINUTE':
      return new Decimal(s.n).div(minutes)
    case 'ERROR_COUNT':
      return new Decimal(s.errors)
    case 'ERROR_RATE':
      return s.n === 0 ? null : new Decimal(s.errors).mul(100).div(s.n)
    case 'TRACE_COST': {
      // The costliest trace in the window.
      let max: Decimal | null = null
      for (const c of Object.values(s.traces ?? {})) if (max === null || new Decimal(c).gt(max)) max = new Decimal(c)
      return max
    }
    case 'LATENCY_P95': {
      const durations = [...(s.durations ?? [])].sort((a, b) => a - b)
      return durations.length === 0 ? null : new Decimal(nearestRank(durations, 95))
    }
  }
}

/** How a measurement compares with the rule: the value shown (and sent in events) and whether the rule's condition holds. */
export interface Verdict {
  /** The compared value: the metric, or for RELATIVE_CHANGE the change (an amount or a percentage). Null: nothing to compare. */
  value: Decimal | null
  /** Null when there is nothing to compare: the rule keeps its state. */
  holds: boolean | null
}

function compare(value: Decimal, op: string, threshold: Decimal): boolean {
  switch (op) {
    case 'GREATER_THAN':
      return value.gt(threshold)
    case 'GREATER_THAN_OR_EQUAL':
      return value.gte(threshold)
    case 'LESS_THAN':
      return value.lt(threshold)
    case 'LESS_THAN_OR_EQUAL':
      return value.lte(threshold)
    default: // the change operators hold once the change reaches the threshold
      return value.gte(threshold)
  }
}

/**
 * THRESHOLD and CUMULATIVE_USAGE compare the metric with the threshold. RELATIVE_CHANGE compares
 * the change from the previous window: INCREASES_BY / DECREASES_BY by amount, PERCENT_INCREASE /
 * PERCENT_DECREASE by percentage, and a comparison operator compares the signed percentage. A
 * percentage of a zero previous window is undefined: nothing to compare.
 */
export function judge(rule: Pick<AlertRule, 'alertType' | 'operatorType' | 'threshold'>, current: Decimal | null, previous?: Decimal | null): Verdict {
  const threshold = new Decimal(rule.threshold)
  if (current === null) return { value: null, holds: null }
  if (rule.alertType !== 'RELATIVE_CHANGE') return { value: current, holds: compare(current, rule.operatorType, threshold) }
  if (previous === null || previous === undefined) return { value: null, holds: null }
  let value: Decimal
  switch (rule.operatorType) {
    case 'INCREASES_BY':
      value = current.minus(previous)
      break
    case 'DECREASES_BY':
      value = previous.minus(current)
      break
    default: {
      if (previous.isZero()) return { value: null, holds: null }
      const pct = current.minus(previous).mul(100).div(previous)
      value = rule.operatorType === 'PERCENT_DECREASE' ? pct.neg() : pct
    }
  }
  return { value, holds: compare(value, rule.operatorType, threshold) }
}
