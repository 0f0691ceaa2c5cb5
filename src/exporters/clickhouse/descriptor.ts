// The clickhouse exporter as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type, type Static } from '@sinclair/typebox'
import type { Descriptor, ExporterFactory } from '../../host/component.js'

const NAME = '^[A-Za-z_][A-Za-z0-9_]*$'

const schema = Type.Object(
  {
    endpoint: Type.String({ pattern: '^https?://[^\\s]+$', description: "ClickHouse's HTTP interface, e.g. http://clickhouse:8123", examples: ['http://clickhouse:8123'] }),
    username: Type.String({ default: 'default', description: 'ClickHouse user' }),
    password: Type.String({ default: '', description: 'Its password, e.g. ${env:METERD_CLICKHOUSE_PASSWORD}' }),
    database: Type.String({ default: 'meterd', pattern: NAME, description: 'Database of the records table (created when missing)' }),
    table: Type.String({ default: 'usage_records', pattern: NAME, description: 'The records table (created when missing; docs/clickhouse.md)' }),
    batch_size: Type.Integer({ default: 5000, minimum: 1, maximum: 100_000, description: 'Records per INSERT at most' }),
    flush_interval_ms: Type.Integer({ default: 1000, minimum: 1, description: 'A batch smaller than batch_size is inserted once its oldest record has waited this long' }),
    max_queue_records: Type.Integer({ default: 10_000_000, minimum: 1, description: 'Records the local queue holds at most; when full, requests are answered 503 with Retry-After' }),
    timeout_ms: Type.Integer({ default: 30_000, minimum: 100, description: 'Per-request timeout' }),
    initial_backoff_ms: Type.Integer({ default: 500, minimum: 1, description: 'First delay after a failed insert; doubles per consecutive failure' }),
    max_backoff_ms: Type.Integer({ default: 30_000, minimum: 1, description: 'Longest delay between retries' }),
    jitter: Type.Number({ default: 0.2, minimum: 0, maximum: 1, description: 'Each delay is stretched by up to this fraction, at random' }),
  },
  { additionalProperties: false },
)
export type Config = Static<typeof schema>

export const clickhouseDescriptor: Descriptor<ExporterFactory<typeof schema>> = {
  kind: 'exporter',
  type: 'clickhouse',
  description: 'Inserts usage records into a ClickHouse table through a persistent local queue (gateway: records and analytics at scale)',
  signals: ['usage'],
  schema,
}
