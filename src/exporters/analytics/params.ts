import { invalid } from '../../core/errors.js'
import { DIMENSIONS, type AnalyticsQuery, type DimensionFilter } from '../../domain/analytics/index.js'
import { unitsOfMoney } from '../../domain/pricing/money.js'
import { checkTeam, timeParam } from '../../transport/http/query.js'
import type { RequestContext } from '../../transport/http/server.js'

const DAY = 86_400_000
/** Query parameters every analytics endpoint takes besides its own. */
const COMMON = ['from', 'to', 'teamId', 'tenantId', ...DIMENSIONS] as const
const MAX_VALUE = 255

export interface ReadQuery extends AnalyticsQuery {
  team: string
  /** The filters as given, for the answer. */
  given: Record<string, string>
}

/**
 * The team, time range and filters of an analytics request. Unknown parameters are refused
 * (a misspelt filter would otherwise widen the answer silently), and so is one given twice.
 * `to` defaults to now and `from` to 24 hours before `to`; `whole: true` leaves them
 * open instead (a trace's detail).
 */
export function readQuery(ctx: RequestContext, now: number, own: readonly string[], opts: { whole?: boolean } = {}): ReadQuery {
  const team = checkTeam(ctx)
  const allowed = new Set<string>([...COMMON, ...own])
  for (const name of new Set(ctx.query.keys())) {
    if (!allowed.has(name)) throw invalid('invalid_parameter', `unknown query parameter ${name}; this endpoint takes ${[...allowed].join(', ')}`, name)
    if (ctx.query.getAll(name).length > 1) throw invalid('invalid_parameter', `${name} is given more than once`, name)
  }
  const fromText = timeParam(ctx, 'from')
  const toText = timeParam(ctx, 'to')
  const to = toText === undefined ? (opts.whole ? Infinity : now) : Date.parse(toText)
  const from = fromText === undefined ? (opts.whole ? -Infinity : to - DAY) : Date.parse(fromText)
  if (from >= to) throw invalid('invalid_parameter', toText === undefined ? 'from must be earlier than now (the default to)' : 'to must be later than from', toText === undefined ? 'from' : 'to')
  const filters: DimensionFilter[] = []
  const given: Record<string, string> = {}
  for (const dimension of DIMENSIONS) {
    const value = ctx.query.get(dimension)
    if (value === null || value === '') continue
    if (value.length > MAX_VALUE) throw invalid('invalid_parameter', `${dimension} is longer than ${MAX_VALUE} characters`, dimension)
    filters.push({ dimension, op: 'equals', value })
    given[dimension] = value
  }
  return { team, from, to, filters, given }
}

/** A parameter that must be one of `values`; `def` when absent. */
export function choice<T extends string>(ctx: RequestContext, name: string, values: readonly T[], def: T): T {
  const v = ctx.query.get(name)
  if (v === null || v === '') return def
  if (!(values as readonly string[]).includes(v)) throw invalid('invalid_parameter', `${name} must be one of ${values.join(', ')}`, name)
  return v as T
}

/** An integer parameter in [min, max]; `def` when absent. */
export function integer(ctx: RequestContext, name: string, min: number, max: number, def: number): number {
  const v = ctx.query.get(name)
  if (v === null || v === '') return def
  const n = Number(v)
  if (!/^\d+$/.test(v) || n < min || n > max) throw invalid('invalid_parameter', `${name} must be an integer from ${min} to ${max}`, name)
  return n
}

const AMOUNT = /^\d{1,15}(\.\d{1,12})?$/

/** A USD amount parameter (a plain decimal, at most 12 places) in units, or undefined when absent. */
export function amount(ctx: RequestContext, name: string): bigint | undefined {
  const v = ctx.query.get(name)
  if (v === null || v === '') return undefined
  if (!AMOUNT.test(v)) throw invalid('invalid_parameter', `${name} must be a non-negative USD amount such as 0.25 (at most 12 decimal places)`, name)
  return unitsOfMoney(v)!
}
