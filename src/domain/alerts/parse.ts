import { invalid } from '../../core/errors.js'
import { Decimal } from '../pricing/money.js'
import {
  ALERT_TYPES,
  CHANGE_OPERATORS,
  COMPARISON_OPERATORS,
  FILTER_DIMENSIONS,
  FILTER_OPERATOR_ALIASES,
  FILTER_OPERATORS,
  METRIC_TYPES,
  OPERATOR_ALIASES,
  PERIODS,
  type AlertFilter,
  type AlertRule,
  type AlertType,
  type FilterDimension,
  type FilterOperator,
  type OperatorType,
  type SlackTarget,
} from './model.js'

/** The fields of a rule a client sets (everything but id, team and the timestamps). */
export type RuleFields = Omit<AlertRule, 'id' | 'team' | 'createdAt' | 'updatedAt'>

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)

/** Longest window a rule may measure over with `windowSeconds` (a week: longer ones are periods). */
export const MAX_WINDOW_SECONDS = 7 * 24 * 3600
const MAX_FILTERS = 20
const MAX_LIST = 50

/** A value of a closed list, case-insensitive, aliases resolved; 400 naming the field and the allowed values. */
function oneOf<T extends string>(v: unknown, allowed: readonly T[], field: string, aliases: Readonly<Record<string, T>> = {}): T {
  const text = typeof v === 'string' ? v.trim().toUpperCase() : undefined
  const found = text === undefined ? undefined : (aliases[text] ?? (allowed.includes(text as T) ? (text as T) : undefined))
  if (found === undefined)
    throw invalid('invalid_field', `${field} must be one of ${allowed.join(', ')}${v === undefined ? '' : ` (got ${JSON.stringify(v)})`}`, field)
  return found
}

/**
 * The largest threshold in size: more than any cost (prices are at most 10^9), count or percentage
 * a rule measures. Past 10^21 the answers' JSON number showed an exponent, and a decimal string
 * past 10^308 read back as null (the rule compared with a threshold the client could not see).
 */
export const MAX_THRESHOLD = '1000000000000000'

/** A finite decimal of at most MAX_THRESHOLD in size, sent as a JSON number or a decimal string. */
function decimal(v: unknown, field: string): string {
  const ok = (typeof v === 'number' && Number.isFinite(v)) || (typeof v === 'string' && /^-?\d+(\.\d+)?$/.test(v.trim()))
  const d = ok ? new Decimal(typeof v === 'number' ? String(v) : (v as string).trim()) : undefined
  if (d === undefined || d.abs().gt(MAX_THRESHOLD))
    throw invalid('invalid_field', `${field} must be a number (or a decimal string) from -${MAX_THRESHOLD} to ${MAX_THRESHOLD}`, field)
  return d.toString()
}

function text(v: unknown, field: string, max: number, required: boolean): string {
  if (v === undefined || v === null) {
    if (required) throw invalid('missing_field', `${field} is required`, field)
    return ''
  }
  if (typeof v !== 'string' || (required && v.trim() === '') || v.length > max)
    throw invalid('invalid_field', `${field} must be a${required ? ' non-empty' : ''} string of at most ${max} characters`, field)
  return v.trim()
}

function stringList(v: unknown, field: string, check: (s: string, path: string) => void = () => {}): string[] {
  if (v === undefined || v === null) return []
  if (!Array.isArray(v) || v.length > MAX_LIST) throw invalid('invalid_field', `${field} must be a list of at most ${MAX_LIST} strings`, field)
  return v.map((s, i) => {
    const path = `${field}[${i}]`
    if (typeof s !== 'string' || s.trim() === '' || s.length > 320) throw invalid('invalid_field', `${path} must be a non-empty string`, path)
    check(s.trim(), path)
    return s.trim()
  })
}

function parseFilters(v: unknown): AlertFilter[] {
  if (v === undefined || v === null) return []
  if (!Array.isArray(v) || v.length > MAX_FILTERS) throw invalid('invalid_field', `filters must be a list of at most ${MAX_FILTERS} {dimension, operator, value} rows`, 'filters')
  return v.map((row, i) => {
    const path = `filters[${i}]`
    if (!isObject(row)) throw invalid('invalid_field', `${path} must be an object {dimension, operator, value}`, path)
    const dimension = oneOf<FilterDimension>(row.dimension, FILTER_DIMENSIONS, `${path}.dimension`)
    const operator = oneOf<FilterOperator>(row.operator ?? 'IS', FILTER_OPERATORS, `${path}.operator`, FILTER_OPERATOR_ALIASES)
    let values: string[]
    if (operator === 'IN') {
      values = stringList(row.values, `${path}.values`)
      if (values.length === 0) throw invalid('invalid_field', `${path}.values must be a non-empty list of strings (IN reads values, not value)`, `${path}.values`)
    } else {
      if (Array.isArray(row.values) && row.values.length > 0)
        throw invalid('invalid_field', `${path}: ${operator} takes one value; use operator IN to match a list`, `${path}.values`)
      values = [text(row.value, `${path}.value`, 255, true)]
    }
    return { dimension, operator, values }
  })
}

function parseSlack(v: unknown): SlackTarget[] {
  if (v === undefined || v === null) return []
  if (!Array.isArray(v) || v.length > MAX_LIST) throw invalid('invalid_field', `slackConfigurations must be a list of at most ${MAX_LIST} Slack incoming-webhook URLs or {webhookUrl, channel?} objects`, 'slackConfigurations')
  return v.map((entry, i) => {
    const path = `slackConfigurations[${i}]`
    const url = typeof entry === 'string' ? entry : isObject(entry) ? entry.webhookUrl : undefined
    if (typeof url !== 'string') throw invalid('invalid_field', `${path} must be a Slack incoming-webhook URL or {webhookUrl, channel?}`, path)
    let u: URL
    try {
      u = new URL(url)
    } catch {
      throw invalid('invalid_url', `${path}: ${JSON.stringify(url)} is not an absolute URL`, path)
    }
    if (u.protocol !== 'https:' && u.protocol !== 'http:') throw invalid('invalid_url', `${path} must be an http(s) URL`, path)
    const channel = isObject(entry) && entry.channel !== undefined ? text(entry.channel, `${path}.channel`, 80, false) : ''
    return channel ? { webhookUrl: u.toString(), channel } : { webhookUrl: u.toString() }
  })
}

/** Export configuration ids, sent as strings or as `{id}` objects. */
function parseWebhookIds(v: unknown): string[] {
  if (Array.isArray(v)) v = v.map((x) => (isObject(x) && typeof x.id === 'string' ? x.id : x))
  return [...new Set(stringList(v, 'webhookConfigurations'))]
}

const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/

/**
 * A create body (`full`), or a change of `current` (PUT sends the whole rule, as the CLI's
 * get → merge → put does; fields it leaves out keep their values). `firing`, `id`, `teamId` and
 * the timestamps are read-only and ignored here. Every 400 names its field.
 */
export function parseRule(body: unknown, current?: RuleFields): RuleFields {
  if (!isObject(body)) throw invalid('invalid_body', 'the body must be a JSON object')
  const has = (k: string) => body[k] !== undefined
  const pick = <T>(k: string, parse: (v: unknown) => T, fallback: T | undefined, required = false): T => {
    if (has(k)) return parse(body[k])
    if (fallback !== undefined) return fallback
    if (required) throw invalid('missing_field', `${k} is required`, k)
    return parse(undefined)
  }
  const alertType = pick('alertType', (v) => oneOf<AlertType>(v, ALERT_TYPES, 'alertType'), current?.alertType, true)
  const metricType = pick('metricType', (v) => oneOf(v, METRIC_TYPES, 'metricType'), current?.metricType, true)
  const allowed: readonly OperatorType[] = alertType === 'RELATIVE_CHANGE' ? [...CHANGE_OPERATORS, ...COMPARISON_OPERATORS] : COMPARISON_OPERATORS
  const operatorType = pick('operatorType', (v) => oneOf<OperatorType>(v, allowed, 'operatorType', OPERATOR_ALIASES), current?.operatorType, true)
  if (!allowed.includes(operatorType)) throw invalid('invalid_field', `operatorType must be one of ${allowed.join(', ')} for ${alertType} alerts`, 'operatorType')
  const budgetThreshold = pick('budgetThreshold', (v) => (v === undefined || v === null ? null : decimal(v, 'budgetThreshold')), current?.budgetThreshold ?? undefined)
  // A budget names its amount in budgetThreshold; the CLI's budget command sends both. An explicit
  // null is "not set" (Python's None, Go's nil pointer), as DESIGN's input rules take it: absent.
  const threshold = has('threshold') && body.threshold !== null
    ? decimal(body.threshold, 'threshold')
    : budgetThreshold !== null && alertType === 'CUMULATIVE_USAGE'
      ? budgetThreshold
      : current?.threshold !== undefined
        ? current.threshold
        : decimal(undefined, 'threshold')
  const periodDuration = pick('periodDuration', (v) => oneOf(v, PERIODS, 'periodDuration'), current?.periodDuration, true)
  const windowSeconds = pick(
    'windowSeconds',
    (v) => {
      if (v === undefined || v === null) return null
      if (typeof v !== 'number' || !Number.isInteger(v) || v < 60 || v > MAX_WINDOW_SECONDS)
        throw invalid('invalid_field', `windowSeconds must be an integer from 60 to ${MAX_WINDOW_SECONDS}`, 'windowSeconds')
      return v
    },
    current?.windowSeconds ?? undefined,
  )
  if (windowSeconds !== null && alertType === 'CUMULATIVE_USAGE')
    throw invalid('invalid_field', 'windowSeconds does not apply to CUMULATIVE_USAGE alerts: they add up the calendar period of periodDuration', 'windowSeconds')
  const currency = pick('currency', (v) => (v === undefined || v === null ? null : oneOf(v, ['USD'] as const, 'currency')), current?.currency ?? undefined)
  const enabled = pick(
    'enabled',
    (v) => {
      if (v === undefined || v === null) return current?.enabled ?? true
      if (typeof v !== 'boolean') throw invalid('invalid_field', 'enabled must be a boolean', 'enabled')
      return v
    },
    current?.enabled,
  )
  return {
    name: pick('name', (v) => text(v, 'name', 200, true), current?.name, true),
    description: pick('description', (v) => text(v, 'description', 2000, false), current?.description),
    alertType,
    metricType,
    operatorType,
    threshold,
    periodDuration,
    windowSeconds,
    budgetThreshold,
    currency,
    filters: pick('filters', parseFilters, current?.filters),
    notificationAddresses: pick(
      'notificationAddresses',
      (v) =>
        stringList(v, 'notificationAddresses', (s, path) => {
          if (!EMAIL.test(s)) throw invalid('invalid_field', `${path} must be an e-mail address`, path)
        }),
      current?.notificationAddresses,
    ),
    slackConfigurations: pick('slackConfigurations', parseSlack, current?.slackConfigurations),
    webhookConfigurations: pick('webhookConfigurations', parseWebhookIds, current?.webhookConfigurations),
    enabled,
  }
}
