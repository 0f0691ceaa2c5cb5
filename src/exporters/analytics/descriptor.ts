// The analytics exporter as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type, type Static } from '@sinclair/typebox'
import type { Descriptor, ExporterFactory } from '../../host/component.js'

const schema = Type.Object(
  {
    query_api: Type.Boolean({ default: true, description: 'Serve the read endpoints under /{api_prefix}/v2/api/analytics/ (docs/analytics.md)' }),
    max_buckets: Type.Integer({ default: 2000, minimum: 1, maximum: 100_000, description: 'Most buckets tools/cost-over-time answers with; a longer from..to for its interval is a 400' }),
    backend: Type.Union([Type.Literal('embedded'), Type.Literal('clickhouse')], {
      default: 'embedded',
      description: 'Where the endpoints are answered from: the in-memory index of this process\'s records (embedded), or the ClickHouse table a clickhouse exporter fills (every replica\'s records; no index is kept in memory). docs/clickhouse.md',
    }),
    clickhouse_exporter: Type.String({ default: 'clickhouse', description: 'With backend clickhouse: the id of the clickhouse exporter (in any pipeline) whose table is queried' }),
    reprice_poll_ms: Type.Integer({ default: 1000, minimum: 10, description: 'How often records stored unpriced are checked for a price set since by `meterd reprice` (another process)' }),
  },
  { additionalProperties: false },
)
export type Config = Static<typeof schema>

export const analyticsDescriptor: Descriptor<ExporterFactory<typeof schema>> = {
  kind: 'exporter',
  type: 'analytics',
  description: 'Analytics of the stored usage records, with the /analytics read endpoints: from memory, or from ClickHouse (backend)',
  signals: ['usage'],
  schema,
}
