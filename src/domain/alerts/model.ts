/**
 * Cost and performance alerts (DESIGN §8), in the words and wire spellings of the vendor's own CLI
 * and MCP server (wire-contract §5): a rule measures one metric of a team's usage over a window,
 * compares it with a threshold, and fires `alert.triggered` once when the comparison starts to hold
 * and `alert.resolved` once when it stops.
 */

export const ALERT_TYPES = ['THRESHOLD', 'RELATIVE_CHANGE', 'CUMULATIVE_USAGE'] as const
export type AlertType = (typeof ALERT_TYPES)[number]

export const METRIC_TYPES = [
  'TOTAL_COST',
  'COST_PER_TRANSACTION',
  'TOKEN_COUNT',
  'INPUT_TOKENS',
  'OUTPUT_TOKENS',
  'TOKENS_PER_MINUTE',
  'REQUESTS_PER_MINUTE',
  'ERROR_RATE',
  'ERROR_COUNT',
  'TRACE_COST',
  'LATENCY_P95',
] as const
export type MetricType = (typeof METRIC_TYPES)[number]

/** Metrics whose value is money (exact decimals, compared and shown as decimal strings). */
export const MONEY_METRICS: ReadonlySet<MetricType> = new Set(['TOTAL_COST', 'COST_PER_TRANSACTION', 'TRACE_COST'])

/**
 * A value against a fixed threshold. The platform spells the inclusive ones with `_TO`; the CLI's
 * documentation without it: both are accepted and the `_TO`-less spelling is stored.
 */
export const COMPARISON_OPERATORS = ['GREATER_THAN', 'GREATER_THAN_OR_EQUAL', 'LESS_THAN', 'LESS_THAN_OR_EQUAL'] as const
/** One window against the window before it (RELATIVE_CHANGE only): by an amount, or by a percentage. */
export const CHANGE_OPERATORS = ['INCREASES_BY', 'DECREASES_BY', 'PERCENT_INCREASE', 'PERCENT_DECREASE'] as const
export type ComparisonOperator = (typeof COMPARISON_OPERATORS)[number]
export type ChangeOperator = (typeof CHANGE_OPERATORS)[number]
export type OperatorType = ComparisonOperator | ChangeOperator
export const OPERATOR_ALIASES: Readonly<Record<string, OperatorType>> = {
  GREATER_THAN_OR_EQUAL_TO: 'GREATER_THAN_OR_EQUAL',
  LESS_THAN_OR_EQUAL_TO: 'LESS_THAN_OR_EQUAL',
}

export const PERIODS = ['ONE_HOUR', 'DAILY', 'WEEKLY', 'MONTHLY', 'QUARTERLY'] as const
export type Period = (typeof PERIODS)[number]

/** The attribution dimensions a rule can be narrowed by (the vendor's `AIAnomalyFilter.dimension`). */
export const FILTER_DIMENSIONS = ['ORGANIZATION', 'PRODUCT', 'MODEL', 'PROVIDER', 'AGENT', 'SUBSCRIBER', 'CREDENTIAL', 'TASK_TYPE', 'ENVIRONMENT', 'TOOL'] as const
export type FilterDimension = (typeof FILTER_DIMENSIONS)[number]

/** The vendor's `AIAnomalyFilter.operator`; IN reads `values`, every other operator `value`. */
export const FILTER_OPERATORS = ['IS', 'IS_NOT', 'CONTAINS', 'STARTS_WITH', 'ENDS_WITH', 'IN'] as const
export type FilterOperator = (typeof FILTER_OPERATORS)[number]
export const FILTER_OPERATOR_ALIASES: Readonly<Record<string, FilterOperator>> = {
  EQUALS: 'IS',
  EQUAL: 'IS',
  NOT_EQUALS: 'IS_NOT',
  NOT_EQUAL: 'IS_NOT',
}

/** One filter row: the rows of a rule are combined with AND. Matching ignores case. */
export interface AlertFilter {
  dimension: FilterDimension
  operator: FilterOperator
  /** The value, or for IN every listed value, as sent (compared ignoring case). */
  values: string[]
}

/** A Slack incoming webhook a rule posts a plain message to. */
export interface SlackTarget {
  webhookUrl: string
  channel?: string
}

export interface AlertRule {
  /** Short, URL-safe, e.g. `75BjG5` (the CLI prints and reuses it). */
  id: string
  team: string
  name: string
  description: string
  alertType: AlertType
  metricType: MetricType
  operatorType: OperatorType
  /** A decimal string (money or a count or a percentage, depending on the metric and operator). */
  threshold: string
  periodDuration: Period
  /** A short sliding window instead of the period (THRESHOLD and RELATIVE_CHANGE). */
  windowSeconds: number | null
  /** CUMULATIVE_USAGE budgets: the budget amount (the threshold is compared with it when set). */
  budgetThreshold: string | null
  currency: string | null
  filters: AlertFilter[]
  /** Kept and returned; meterd sends no e-mail (docs/alerts.md). */
  notificationAddresses: string[]
  slackConfigurations: SlackTarget[]
  /** Export configurations (ids) that receive this rule's events; empty = every configuration subscribed to alert events. */
  webhookConfigurations: string[]
  enabled: boolean
  createdAt: string
  updatedAt: string
}

/** What the evaluator last saw of a rule; survives restarts. */
export interface AlertState {
  firing: boolean
  /** The last measured value (decimal string), null before the first evaluation or with no data to compare. */
  currentValue: string | null
  /** The window of that measurement (ISO), and when it was taken (ms). */
  windowFrom: string | null
  windowTo: string | null
  evaluatedAt: number | null
  /** When the current firing began (ms). */
  firingSince: number | null
}

export const INITIAL_STATE: AlertState = {
  firing: false,
  currentValue: null,
  windowFrom: null,
  windowTo: null,
  evaluatedAt: null,
  firingSince: null,
}

export type AlertEventKind = 'alert.triggered' | 'alert.resolved'

/** One entry of a rule's history (`…/anomaly/{id}/events`). */
export interface AlertEvent {
  /** The id of the webhook event that carried it (`evt_…`). */
  id: string
  ruleId: string
  type: AlertEventKind
  at: string
  metricType: MetricType
  operatorType: OperatorType
  value: string
  threshold: string
  windowFrom: string
  windowTo: string
}
