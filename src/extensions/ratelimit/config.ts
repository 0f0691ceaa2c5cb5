import { Type, type Static } from '@sinclair/typebox'

const perSecond = (dflt: number, bucket: string) =>
  Type.Integer({ default: dflt, minimum: 1, description: `Requests per second per account in the ${bucket} bucket` })

/** Limits of the three buckets (SPEC Limits). */
export const BucketLimitsSchema = Type.Object(
  {
    metering: perSecond(1000, 'metering'),
    analytics: perSecond(100, 'analytics'),
    platform: perSecond(50, 'platform'),
  },
  { additionalProperties: false, default: {} },
)

const AccountLimitsSchema = Type.Object(
  {
    metering: Type.Optional(Type.Integer({ minimum: 1 })),
    analytics: Type.Optional(Type.Integer({ minimum: 1 })),
    platform: Type.Optional(Type.Integer({ minimum: 1 })),
  },
  { additionalProperties: false },
)

export const ErrorPatternSchema = Type.Object(
  {
    enabled: Type.Boolean({ default: true, description: 'Block callers that keep getting 4xx answers (429s excluded)' }),
    threshold: Type.Integer({ default: 50, minimum: 1, description: 'This many 4xx answers within window_seconds block the caller' }),
    window_seconds: Type.Number({ default: 10, exclusiveMinimum: 0, description: 'Sliding window in which the 4xx answers are counted' }),
    initial_cooldown_seconds: Type.Integer({ default: 30, minimum: 1, description: 'Length of a first block' }),
    max_cooldown_seconds: Type.Integer({ default: 3600, minimum: 1, description: 'Cap of the cooldown, which doubles on each consecutive violation' }),
  },
  { additionalProperties: false, default: {} },
)

export const RedisSchema = Type.Object(
  {
    url: Type.String({ default: 'redis://127.0.0.1:6379', description: 'Redis shared by every replica (gateway mode)' }),
    key_prefix: Type.String({ default: 'meterd:rl:', description: 'Prefix of every key this extension writes' }),
    fail_open: Type.Boolean({
      default: true,
      description: 'When Redis is unreachable: true admits requests, limited by each replica on its own; false answers 503',
    }),
    command_timeout_ms: Type.Integer({ default: 250, minimum: 1, description: 'A Redis call slower than this counts as a failure' }),
    connect_timeout_ms: Type.Integer({ default: 2000, minimum: 1, description: 'How long start-up waits for Redis before serving anyway' }),
  },
  { additionalProperties: false, default: {} },
)

export const RateLimitSchema = Type.Object(
  {
    backend: Type.Union([Type.Literal('memory'), Type.Literal('redis')], {
      default: 'memory',
      description: 'memory: exact, one process; redis: shared by every replica (gateway mode)',
    }),
    limits: BucketLimitsSchema,
    accounts: Type.Record(Type.String(), AccountLimitsSchema, {
      default: {},
      description: 'Per-account overrides of `limits`, keyed by account id',
    }),
    error_pattern: ErrorPatternSchema,
    client_ip_header: Type.Optional(
      Type.String({
        minLength: 1,
        description: 'Take an unauthenticated caller\'s IP from this header (first address), e.g. x-forwarded-for behind a trusted proxy',
      }),
    ),
    redis: RedisSchema,
  },
  { additionalProperties: false },
)

export type RateLimitConfig = Static<typeof RateLimitSchema>
export type BucketLimits = Static<typeof BucketLimitsSchema>
export type ErrorPatternConfig = Static<typeof ErrorPatternSchema>
export type RedisConfig = Static<typeof RedisSchema>
