import { Type, type Static, type TSchema } from '@sinclair/typebox'
import { Value, ValueErrorType, type ValueError } from '@sinclair/typebox/value'

/**
 * Where replicas of a gateway cluster share dedup, Idempotency-Keys, tier quantities, keys, tools,
 * export configurations, alert rules and webhook claims (docs/deployment.md, Gateway).
 */
export const SharedStateSchema = Type.Object(
  {
    backend: Type.Union([Type.Literal('embedded'), Type.Literal('redis')], {
      default: 'embedded',
      description: 'embedded: this process and its LMDB alone (standalone, sidecar); redis: shared by every replica of a gateway cluster',
    }),
    redis: Type.Object(
      {
        url: Type.String({ default: 'redis://127.0.0.1:6379', description: 'Redis shared by every replica' }),
        key_prefix: Type.String({ default: 'meterd:', description: 'Prefix of every key the shared state writes' }),
        command_timeout_ms: Type.Integer({ default: 1000, minimum: 1, description: 'A Redis call slower than this counts as a failure (the request gets a 503)' }),
        connect_timeout_ms: Type.Integer({ default: 2000, minimum: 1, description: 'How long start-up waits for Redis' }),
        claim_ttl_seconds: Type.Integer({
          default: 30,
          minimum: 1,
          description: 'How long a transactionId or Idempotency-Key claimed by a replica that died before answering blocks other replicas',
        }),
        resync_seconds: Type.Number({
          default: 5,
          exclusiveMinimum: 0,
          description: 'Every this often each replica re-reads keys, tools, export configurations and alert rules from Redis (a safety net behind pub/sub)',
        }),
        leader_lease_seconds: Type.Number({
          default: 5,
          minimum: 0.3,
          description:
            'The lease that elects the one replica evaluating alert rules for the cluster: renewed every third of it; when its holder dies another replica takes over within 4/3 of it',
        }),
      },
      { additionalProperties: false, default: {} },
    ),
  },
  { additionalProperties: false, default: {} },
)
export type SharedStateConfig = Static<typeof SharedStateSchema>

/** The HTTP listener that serves the base URL (DESIGN §3). */
export const ServerSchema = Type.Object(
  {
    endpoint: Type.String({ default: '127.0.0.1:8080', description: 'host:port of the base URL listener' }),
    api_prefix: Type.String({
      default: 'profitstream',
      pattern: '^[A-Za-z0-9_-]+$',
      description: 'Path segment of the platform and analytics API: /{api_prefix}/v2/api/...',
    }),
    vendor_word: Type.String({
      default: 'Service',
      pattern: '^[A-Za-z0-9-]+$',
      description: 'Word in vendor header names, e.g. X-Service-Signature-256',
    }),
    max_body_bytes: Type.Integer({ default: 1048576, minimum: 1024, description: 'Request body limit, after decompression (413 above it)' }),
    max_body_bytes_in_flight: Type.Integer({
      default: 268435456,
      minimum: 1048576,
      description:
        'Bytes of request bodies being received at once by a process (a worker), every HTTP listener together, and of OTLP/gRPC messages being handled (their size after decompression): past it a request gets 503 overloaded with Retry-After, a gRPC call UNAVAILABLE with RetryInfo (one body or message alone is always taken). Bounds the memory that slow or stalled uploads hold',
    }),
    max_json_depth: Type.Integer({ default: 32, minimum: 4, maximum: 256, description: 'Deepest nesting accepted in a JSON body (OTLP/JSON bodies: at least 160, the depth that OTLP nested values take in JSON)' }),
    shutdown_timeout_ms: Type.Integer({ default: 10000, minimum: 0, description: 'How long SIGTERM waits for in-flight requests and exporters to drain and, in a gateway cluster, for what the replica owes Redis to be settled (docs/deployment.md)' }),
    shared_state: SharedStateSchema,
    workers: Type.Union([Type.Literal('auto'), Type.Integer({ minimum: 1, maximum: 64 })], {
      default: 'auto',
      description:
        'Processes serving the same listeners over the one data directory: auto = one per core, no more than the CPU limit of its container (cgroup quota) rounded up; 1 = a single process. Limits, dedup, tiers and the webhook queue stay exact across them (docs/deployment.md)',
    }),
    supervisor_timeout_seconds: Type.Integer({
      default: 10,
      minimum: 2,
      maximum: 3600,
      description:
        'With several workers: how long a worker waits for its supervisor (a rate-limit lease; past it the request gets 503 rate_limiter_unavailable), and how long the supervisor may answer nothing, not even the ping each worker sends every second, before /healthz answers 503 (a supervisor alive but stuck; docs/deployment.md)',
    }),
  },
  { additionalProperties: false, default: {} },
)
export type ServerConfig = Static<typeof ServerSchema>

export const StorageSchema = Type.Object(
  {
    path: Type.String({ default: './data', description: 'Directory of the LMDB environment' }),
    max_size_mb: Type.Integer({ default: 16384, minimum: 16, maximum: 8388608, description: 'Initial size of the memory map, and the most space written ahead (preallocate_mb) may reach; not a limit on the data: lmdb-js maps more when the data outgrows it. Watch free space instead (a full disk: docs/deployment.md). At most 8 TiB: a map past the address space LMDB can reserve (64 TiB here) crashed the process (SIGSEGV) at start' }),
    preallocate_mb: Type.Integer({
      default: 8,
      minimum: 0,
      maximum: 1024,
      description: 'Space kept written (with zeros, in the background) ahead of the data in the data file, so that a commit flushes its pages and no file-system metadata; 0 turns it off (nothing to gain on btrfs or ZFS)',
    }),
  },
  { additionalProperties: false, default: {} },
)
export type StorageConfig = Static<typeof StorageSchema>

const PipelineSchema = Type.Object(
  {
    receivers: Type.Array(Type.String(), { minItems: 1, description: 'Receivers (or connectors) feeding this pipeline' }),
    processors: Type.Optional(Type.Array(Type.String(), { description: 'Processors, in order; each pipeline gets its own instances' })),
    exporters: Type.Array(Type.String(), { minItems: 1, description: 'Exporters (or connectors) the pipeline fans out to; a record is acknowledged when all of them have it' }),
  },
  { additionalProperties: false, description: 'A pipeline: id `signal` or `signal/name`, signal one of usage, traces, logs, metrics' },
)

export const ServiceSchema = Type.Object(
  {
    extensions: Type.Array(Type.String(), { default: [], description: 'Extensions to start (configured under `extensions`), before any pipeline' }),
    pipelines: Type.Record(Type.String(), PipelineSchema, { default: {}, description: 'The pipeline graph, by pipeline id' }),
    telemetry: Type.Object(
      {
        logs: Type.Object(
          { level: Type.Union([Type.Literal('trace'), Type.Literal('debug'), Type.Literal('info'), Type.Literal('warn'), Type.Literal('error'), Type.Literal('silent')], { default: 'info', description: 'Level of the JSON log lines meterd writes to stderr' }) },
          { additionalProperties: false, default: {} },
        ),
      },
      { additionalProperties: false, default: {} },
    ),
  },
  { additionalProperties: false, default: {} },
)

const Components = Type.Record(Type.String(), Type.Union([Type.Object({}, { additionalProperties: true }), Type.Null()]), { default: {} })

export const ConfigSchema = Type.Object(
  {
    server: ServerSchema,
    storage: StorageSchema,
    receivers: Components,
    processors: Components,
    exporters: Components,
    connectors: Components,
    extensions: Components,
    service: ServiceSchema,
  },
  { additionalProperties: false },
)
export type MeterdConfig = Static<typeof ConfigSchema>

export interface ConfigIssue {
  /** Dotted path into the merged config, e.g. `receivers.metering.max_batch`. */
  path: string
  message: string
}

/** Applies the schema's defaults and collects every violation with its full path. */
export function checkAgainst<S extends TSchema>(schema: S, value: unknown, base: string): { value: Static<S>; issues: ConfigIssue[] } {
  const v = Value.Default(schema, Value.Clone(value ?? {}))
  const issues: ConfigIssue[] = []
  for (const e of Value.Errors(schema, v)) {
    // Union errors repeat each branch's complaint; keep the first per path.
    const path = joinPath(base, e.path)
    if (issues.some((i) => i.path === path)) continue
    issues.push({ path, message: describe(e) })
  }
  return { value: v as Static<S>, issues }
}

/** TypeBox's message, except for unions, where it says only "Expected union value": name the choices. */
function describe(e: ValueError): string {
  if (e.type !== ValueErrorType.Union) return e.message
  const branches = ((e.schema as { anyOf?: TSchema[] }).anyOf ?? []) as { const?: unknown }[]
  const got = `got ${JSON.stringify(e.value) ?? String(e.value)}`
  if (branches.length && branches.every((b) => b.const !== undefined)) return `expected ${orList(branches.map((b) => String(b.const)))} (${got})`
  const each = e.errors.map((it) => it.First()?.message).filter((m): m is string => Boolean(m))
  return each.length ? `${orList(each.map((m) => m.replace(/^Expected/, 'expected')))} (${got})` : e.message
}

function orList(items: string[]): string {
  return items.length <= 1 ? items.join('') : `${items.slice(0, -1).join(', ')} or ${items[items.length - 1]}`
}

function joinPath(base: string, pointer: string): string {
  const parts = pointer.split('/').filter(Boolean).map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'))
  // Indexes as in the graph's issues: `models[0].input`.
  return parts.reduce((path, p) => (/^\d+$/.test(p) ? `${path}[${p}]` : path ? `${path}.${p}` : p), base)
}
