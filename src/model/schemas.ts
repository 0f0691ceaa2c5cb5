import { FormatRegistry, Type, type TSchema } from '@sinclair/typebox'
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler'
import { Value } from '@sinclair/typebox/value'
import { withUtcDefault } from './date-time.js'
import type { UsageKind } from './usage-record.js'

// RFC 3339 / ISO-8601 date-time: with or without fractions, with `Z`, an offset or neither (UTC:
// DESIGN §3, "with or without fractions or offset"; Python's isoformat() of a UTC time has none).
const DATE_TIME = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?([Zz]|[+-]\d{2}(:?\d{2})?)?$/

/** A date-time that names a real moment: `2026-02-30` is refused, where Date would roll it into March. */
export function isDateTime(v: string): boolean {
  // The shape nearly every client sends is checked without the regex and Date.parse; the
  // answer is the same (for it, Date.parse fails only on a 60th second).
  if (isCanonicalUtc(v)) {
    const month = d2(v, 5)
    const day = d2(v, 8)
    return month >= 1 && month <= 12 && day >= 1 && day <= daysInMonth(d2(v, 0) * 100 + d2(v, 2), month) && d2(v, 11) <= 23 && d2(v, 14) <= 59 && d2(v, 17) <= 59
  }
  if (!DATE_TIME.test(v)) return false
  const month = Number(v.slice(5, 7))
  const day = Number(v.slice(8, 10))
  const hour = Number(v.slice(11, 13))
  const minute = Number(v.slice(14, 16))
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(Number(v.slice(0, 4)), month) || hour > 23 || minute > 59) return false
  return !Number.isNaN(Date.parse(withUtcDefault(v)))
}
FormatRegistry.Set('date-time', isDateTime)

/** Two decimal digits at i (callers have checked they are digits). */
const d2 = (v: string, i: number): number => (v.charCodeAt(i) - 48) * 10 + (v.charCodeAt(i + 1) - 48)
/** Whether the character at i is a decimal digit. */
const digit = (v: string, i: number): boolean => (v.charCodeAt(i) - 48) >>> 0 < 10

/** `YYYY-MM-DDTHH:MM:SS.sssZ` exactly: what toISOString writes and most clients send. */
function isCanonicalUtc(v: string): boolean {
  // Character codes, not one-character strings: this runs for every timestamp of every record
  // (twice for the event time), and written out rather than as a loop over a table of digit
  // positions, which cost about 220 instructions more per call under callgrind.
  return (
    v.length === 24 &&
    v.charCodeAt(4) === 45 && v.charCodeAt(7) === 45 && v.charCodeAt(10) === 84 && v.charCodeAt(13) === 58 &&
    v.charCodeAt(16) === 58 && v.charCodeAt(19) === 46 && v.charCodeAt(23) === 90 &&
    digit(v, 0) && digit(v, 1) && digit(v, 2) && digit(v, 3) && digit(v, 5) && digit(v, 6) &&
    digit(v, 8) && digit(v, 9) && digit(v, 11) && digit(v, 12) && digit(v, 14) && digit(v, 15) &&
    digit(v, 17) && digit(v, 18) && digit(v, 20) && digit(v, 21) && digit(v, 22)
  )
}

const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
function daysInMonth(year: number, month: number): number {
  const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0
  return month === 2 && leap ? 29 : DAYS_IN_MONTH[month - 1]
}

/**
 * A valid date-time (isDateTime) as `new Date(v).toISOString()` spells it: UTC, milliseconds (one
 * without an offset is UTC).
 * A canonical input is already that spelling and is returned as is.
 */
export function toIsoUtc(v: string): string {
  return isCanonicalUtc(v) ? v : new Date(withUtcDefault(v)).toISOString()
}

/** Every field schema says, in words, what it expects: that sentence is the 400's message. */
const str = (max = 1024) => Type.String({ maxLength: max, expected: `a string of at most ${max} characters` })
const opt = <T extends TSchema>(s: T) => Type.Optional(Type.Union([s, Type.Null()], { expected: `${(s as any).expected} or null` }))
const count = () => Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER, expected: 'a non-negative integer' })
/**
 * A non-negative number bounded as the counts are (2^53 - 1): unbounded, 1e300 was taken. Seconds a
 * media price is charged by: so that with a price of at most 10^9 per second the cost stays within
 * ClickHouse's Decimal128(12) (1e300 was priced at a 301-digit cost). Durations in ms
 * (requestDuration, durationMs, timeToFirstToken, mediationLatency): about 285,000 years, past any
 * real call.
 */
const bounded = (unit: string) =>
  Type.Number({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER, expected: `a non-negative number of at most ${Number.MAX_SAFE_INTEGER}${unit}` })
const billedSeconds = () => bounded(' (seconds)')
const millis = () => bounded(' (ms)')
/**
 * A cost the client sends, which replaces the computed one: bounded as prices are (MAX_PRICE in
 * domain/pricing/money.ts, 10^9 USD). Unbounded, 1e300 was stored as a 301-digit cost that every
 * analytics sum of the team then carried, and that ClickHouse's Decimal128(12) cannot hold.
 */
const clientCost = () => Type.Number({ minimum: 0, maximum: 1e9, expected: 'a non-negative number of at most 1000000000 (USD)' })
/**
 * costMultiplier is stored as sent and applied to no cost; bounded as a client's cost is, so that
 * were it applied to one (at most 10^9) the product would stay within Decimal128(12).
 */
const factor = () => Type.Number({ minimum: 0, maximum: 1e9, expected: 'a non-negative number of at most 1000000000' })
const bool = () => Type.Boolean({ expected: 'a boolean' })
const time = () => Type.String({ format: 'date-time', expected: 'an ISO-8601 date-time such as 2026-11-21T23:55:47.661Z' })
const oneOf = (values: readonly string[]) =>
  Type.Union(values.map((v) => Type.Literal(v)), { expected: `one of ${values.join(', ')}` })
const object = () => Type.Object({}, { additionalProperties: true, expected: 'an object' })

export const STOP_REASONS = ['END', 'END_SEQUENCE', 'TIMEOUT', 'TOKEN_LIMIT', 'COST_LIMIT', 'COMPLETION_LIMIT', 'ERROR', 'CANCELLED'] as const
export const OPERATION_TYPES = ['CHAT', 'GENERATE', 'EMBED', 'CLASSIFY', 'SUMMARIZE', 'TRANSLATE', 'TOOL_CALL', 'RERANK', 'SEARCH', 'MODERATION', 'VISION', 'TRANSFORM', 'GUARDRAIL', 'AUDIO', 'VIDEO', 'IMAGE', 'OTHER'] as const
export const SKIP_REASONS = ['FREE_TIER', 'RATE_LIMITED', 'QUOTA_EXCEEDED', 'CONTENT_POLICY_VIOLATION', 'CAPACITY_UNAVAILABLE', 'SERVICE_UNAVAILABLE'] as const

const subscriber = Type.Object(
  {
    id: opt(str(255)),
    email: opt(str(255)),
    credential: opt(Type.Object({ name: opt(str(255)), value: opt(str(1024)) }, { additionalProperties: true, expected: 'an object with name and value' })),
  },
  { additionalProperties: true, expected: 'an object with id, email and credential' },
)

/** `POST /meter/v2/ai/completions` (wire-contract §1.2, §1.3). Unknown keys are kept. */
export const CompletionSchema = Type.Object(
  {
    model: Type.String({ minLength: 1, maxLength: 255, expected: 'a non-empty string' }),
    provider: Type.String({ minLength: 1, maxLength: 255, expected: 'a non-empty string' }),
    inputTokenCount: Type.Union([count(), Type.Null()], { expected: 'a non-negative integer or null' }),
    outputTokenCount: Type.Union([count(), Type.Null()], { expected: 'a non-negative integer or null' }),
    totalTokenCount: Type.Union([count(), Type.Null()], { expected: 'a non-negative integer or null' }),
    stopReason: oneOf(STOP_REASONS),
    requestTime: time(),
    completionStartTime: time(),
    responseTime: time(),
    requestDuration: millis(),
    isStreamed: opt(bool()),
    costType: opt(str(32)),
    transactionId: opt(Type.String({ minLength: 1, maxLength: 255, expected: 'a string of 1 to 255 characters' })),
    operationType: opt(oneOf(OPERATION_TYPES)),
    organizationName: opt(str(255)),
    productName: opt(str(255)),
    subscriptionId: opt(str(255)),
    subscriber: opt(subscriber),
    agent: opt(str(255)),
    agentVersion: opt(str(255)),
    taskType: opt(str(255)),
    traceId: opt(str(255)),
    traceType: opt(Type.String({ maxLength: 128, pattern: '^[A-Za-z0-9_-]+$', expected: 'letters, digits, _ or -, at most 128' })),
    traceName: opt(str(256)),
    transactionName: opt(str(255)),
    parentTransactionId: opt(str(255)),
    retryNumber: opt(count()),
    environment: opt(str(255)),
    region: opt(str(255)),
    credentialAlias: opt(str(255)),
    ticketId: opt(str(255)),
    taskId: opt(str(255)),
    middlewareSource: opt(str(255)),
    modelSource: opt(str(255)),
    operationSubtype: opt(str(255)),
    responseQualityScore: opt(Type.Number({ minimum: 0, maximum: 1, expected: 'a number from 0.0 to 1.0' })),
    reasoningTokenCount: opt(count()),
    cacheCreationTokenCount: opt(count()),
    cacheReadTokenCount: opt(count()),
    cacheCreation5mTokenCount: opt(count()),
    cacheCreation1hTokenCount: opt(count()),
    inputTokenCost: opt(clientCost()),
    outputTokenCost: opt(clientCost()),
    cacheCreationTokenCost: opt(clientCost()),
    cacheReadTokenCost: opt(clientCost()),
    totalCost: opt(clientCost()),
    costMultiplier: opt(factor()),
    billingSkipped: opt(bool()),
    skipReason: opt(oneOf(SKIP_REASONS)),
    pricingTier: opt(oneOf(['STANDARD', 'BATCH'])),
    timeToFirstToken: opt(millis()),
    mediationLatency: opt(millis()),
    temperature: opt(Type.Number({ expected: 'a number' })),
    errorReason: opt(str(4096)),
    errorCode: opt(Type.Integer({ expected: 'an integer' })),
    attributes: opt(object()),
    systemPrompt: opt(str(200_000)),
    inputMessages: opt(str(200_000)),
    outputResponse: opt(str(200_000)),
    promptsTruncated: opt(bool()),
  },
  { additionalProperties: true },
)

/** `POST /meter/v2/tool/events` (SPEC Tool event, wire-contract §3.1). */
export const ToolEventSchema = Type.Object(
  {
    toolId: Type.String({ minLength: 1, maxLength: 255, pattern: '^[A-Za-z0-9_-]+$', expected: 'letters, digits, - or _ (1 to 255 characters)' }),
    timestamp: time(),
    transactionId: opt(Type.String({ minLength: 1, maxLength: 255, expected: 'a string of 1 to 255 characters' })),
    operation: opt(str(255)),
    durationMs: opt(millis()),
    success: opt(bool()),
    errorMessage: opt(str(4096)),
    costUsd: opt(clientCost()),
    agent: opt(str(255)),
    organizationId: opt(str(255)),
    organizationName: opt(str(255)),
    subscriberCredential: opt(str(1024)),
    product: opt(str(255)),
    productName: opt(str(255)),
    workflowId: opt(str(255)),
    traceId: opt(str(255)),
    usageMetadata: opt(object()),
    agenticJobId: opt(Type.String({ pattern: '^(?!types$|conversion-funnel$)[a-zA-Z0-9][a-zA-Z0-9._-]{0,254}$', expected: 'letters, digits, ., _ or -, starting with a letter or digit' })),
  },
  { additionalProperties: true },
)

/**
 * `POST /meter/v2/ai/images|audio|video` (wire-contract §1.3): a completion's fields, with the
 * token counts and stopReason optional (openai-node sends the counts as null, the Go SDK as 0)
 * and what the provider bills by: images, characters, seconds.
 */
export const MediaSchema = Type.Object(
  {
    ...CompletionSchema.properties,
    inputTokenCount: opt(count()),
    outputTokenCount: opt(count()),
    totalTokenCount: opt(count()),
    stopReason: opt(oneOf(STOP_REASONS)),
    completionStartTime: opt(time()),
    requestedImageCount: opt(count()),
    actualImageCount: opt(count()),
    characterCount: opt(count()),
    durationSeconds: opt(billedSeconds()),
    requestedDurationSeconds: opt(billedSeconds()),
    billingUnit: opt(str(64)),
  },
  { additionalProperties: true },
)

export interface FieldProblem {
  /** Dotted path of the field in the client's object. */
  param: string
  code: 'missing_field' | 'invalid_field'
  message: string
}

type Checker = { check: TypeCheck<TSchema>; schema: TSchema }
const media: Checker = { check: TypeCompiler.Compile(MediaSchema), schema: MediaSchema }
const checks: Record<UsageKind, Checker> = {
  completion: { check: TypeCompiler.Compile(CompletionSchema), schema: CompletionSchema },
  tool: { check: TypeCompiler.Compile(ToolEventSchema), schema: ToolEventSchema },
  image: media,
  audio: media,
  video: media,
}

/** The first problem of a body, naming the field; undefined when the body is valid. */
export function checkBody(kind: UsageKind, body: unknown): FieldProblem | undefined {
  const { check, schema } = checks[kind]
  if (check.Check(body)) return undefined
  return firstProblem(schema, body, [])
}

function firstProblem(schema: TSchema, value: unknown, base: string[]): FieldProblem {
  const first = Value.Errors(schema, value).First()
  if (!first) return { param: base.join('.'), code: 'invalid_field', message: 'invalid record' }
  const segments = [...base, ...first.path.split('/').filter(Boolean)]
  const param = segments.join('.')
  // Every optional field also takes null, so a null that fails names a required field: as absent.
  if (first.value === undefined || first.value === null) return { param, code: 'missing_field', message: `${param} is required` }
  // Walk to the field's own schema for its sentence.
  let s: any = schema
  for (const seg of first.path.split('/').filter(Boolean)) s = s?.properties?.[seg]
  // A nullable object (`subscriber`) reports at its own path: look inside for the real culprit.
  const inner = s?.anyOf?.find((x: any) => x.type === 'object')
  if (inner && typeof first.value === 'object' && first.value !== null && !Array.isArray(first.value)) {
    return firstProblem(inner, first.value, segments)
  }
  const expected = s?.expected
  return { param, code: 'invalid_field', message: expected ? `${param} must be ${expected}` : `${param}: ${first.message}` }
}
