import { Type, type Static } from '@sinclair/typebox'
import type { ConnectorFactory, ConsumingComponent, CreateSettings, Host, SignalConsumers } from '../../core/component.js'
import type { Batch, Consumer, ItemRejection } from '../../core/consumer.js'
import { PermanentError } from '../../core/errors.js'
import { newId } from '../../core/ids.js'
import { ToolRegistry } from '../../domain/tools/registry.js'
import type { LogItem, SpanItem } from '../../model/otlp.js'
import { checkBody } from '../../model/schemas.js'
import { EMPTY_ATTRIBUTION, type Caller, type UsageRecord } from '../../model/usage-record.js'
import { apiKeyNames } from './attribution.js'
import type { MapSettings, Mapped } from './build.js'
import { mapLog } from './logs.js'
import { mapSpan } from './spans.js'
import { ItemRejected } from './view.js'

/** Prompt and response content: large, often personal, and not what metering is for. */
export const CONTENT_ATTRIBUTES = [
  'gen_ai.input.messages', 'gen_ai.output.messages', 'gen_ai.system_instructions', 'gen_ai.tool.definitions',
  'gen_ai.prompt', 'gen_ai.completion', 'gen_ai.tool.call.arguments', 'gen_ai.tool.call.result',
  'llm.input_messages', 'llm.output_messages', 'llm.prompts', 'llm.prompt_template', 'llm.tools', 'llm.invocation_parameters',
  'input.value', 'output.value', 'embedding.embeddings',
  'ai.prompt', 'ai.response.text', 'ai.response.object', 'ai.response.toolCalls', 'ai.response.reasoning',
  'ai.toolCall.args', 'ai.toolCall.result', 'ai.values', 'ai.value', 'ai.embeddings', 'ai.embedding', 'ai.schema',
  'traceloop.entity.input', 'traceloop.entity.output',
  'prompt', 'request_text', 'response_text', 'tool_parameters', 'tool_input', 'tool_output',
]

const schema = Type.Object(
  {
    attribute_prefixes: Type.Array(Type.String({ minLength: 1 }), {
      default: ['service.', 'revenium.'],
      description: 'Prefixes of the attribution attributes (`<prefix>organization.name`, …), in order of precedence; `<prefix>api_key` (and always `service.api_key`, `revenium.api_key`) is never stored',
    }),
    drop_attributes: Type.Array(Type.String({ minLength: 1 }), {
      default: CONTENT_ATTRIBUTES,
      description: 'Attributes not kept on a record (each name also drops the names below it, `name.*`); by default prompt and response content',
    }),
  },
  { additionalProperties: false },
)
type Config = Static<typeof schema>

const NO_CALLER: Caller = { account: '', tenant: '', team: '', environment: '', keyId: '' }

/**
 * Traces and logs → usage (DESIGN §2): GenAI inference spans (GenAI conventions, OpenInference,
 * OpenLLMetry, the Vercel AI SDK) and the coding assistants' usage log records become completion
 * records; `execute_tool` spans of registered tools and `tool.call` records become tool events.
 * Every other item is not usage and is passed over. An item that is usage but cannot be read
 * (negative tokens, no model, a field out of range) is rejected alone and listed in
 * `batch.ctx.rejected`, so the receiver can answer a partial success; when every item of a batch
 * is rejected, the batch fails with a PermanentError. The records go down the usage pipelines
 * with the batch's context (caller, dedup window, write unit), as REST records do.
 */
export class GenaiConnector implements ConsumingComponent {
  readonly consumers: SignalConsumers
  private host?: Host
  private registry?: ToolRegistry
  private readonly prefixes: readonly string[]
  private readonly drop: readonly string[]
  private readonly apiKeys: readonly string[]

  constructor(private readonly settings: CreateSettings, config: Config, next: SignalConsumers) {
    if (!next.usage) throw new Error('the genai connector feeds usage pipelines only')
    const usage = next.usage
    this.prefixes = config.attribute_prefixes
    this.drop = config.drop_attributes
    this.apiKeys = apiKeyNames(config.attribute_prefixes)
    this.consumers = {
      traces: { consume: (batch: Batch<SpanItem>) => this.convert(batch, usage, (item, s) => mapSpan(item, s)) },
      logs: { consume: (batch: Batch<LogItem>) => this.convert(batch, usage, (item, s, now) => mapLog(item, s, now)) },
    }
  }

  async start(host: Host): Promise<void> {
    this.host = host
    for (const ext of host.extensions().values()) {
      const registry = (ext as { registry?: unknown }).registry
      if (registry instanceof ToolRegistry) this.registry = registry
    }
  }

  async shutdown(): Promise<void> {}

  private async convert<T>(batch: Batch<T>, next: Consumer, map: (item: T, s: MapSettings, now: number) => Mapped | undefined): Promise<void> {
    const now = this.host ? this.host.now() : Date.now()
    const receivedAt = new Date(now).toISOString()
    const caller = batch.ctx.caller ?? NO_CALLER
    const registry = this.registry
    const settings: MapSettings = {
      prefixes: this.prefixes,
      drop: this.drop,
      apiKeys: this.apiKeys,
      isRegisteredTool: (toolId) => registry !== undefined && caller.team !== '' && registry.byToolId(caller.team, toolId) !== undefined,
    }
    const records: UsageRecord[] = []
    const rejected: ItemRejection[] = []
    // A batch that repeats a record (an exporter's retry merged into one export) stores it once.
    const seen = new Set<string>()
    for (let i = 0; i < batch.items.length; i++) {
      let mapped: Mapped | undefined
      try {
        mapped = map(batch.items[i], settings, now)
        if (!mapped) continue
        const problem = checkBody(mapped.kind, mapped.body)
        if (problem) throw new ItemRejected(problem.message)
      } catch (err) {
        if (!(err instanceof ItemRejected)) throw err
        rejected.push({ index: i, message: err.message })
        continue
      }
      const key = `${mapped.kind}\0${mapped.body.transactionId}`
      if (seen.has(key)) continue
      seen.add(key)
      records.push(newRecord(newId(now), mapped, caller, receivedAt))
    }
    if (rejected.length) {
      this.settings.metrics.refused(rejected.length)
      ;(batch.ctx.rejected ??= []).push(...rejected)
      if (rejected.length === batch.items.length) {
        const first = rejected[0]
        const more = rejected.length > 1 ? ` (and ${rejected.length - 1} more)` : ''
        throw new PermanentError(`item ${first.index}: ${first.message}${more}`, 'invalid_otlp_items', undefined, first.index)
      }
    }
    if (!records.length) return
    this.settings.metrics.accepted(records.length)
    await next.consume({ items: records, ctx: batch.ctx })
  }
}

function newRecord(id: string, m: Mapped, caller: Caller, receivedAt: string): UsageRecord {
  return {
    id,
    kind: m.kind,
    body: m.body as never,
    eventTime: receivedAt, // the validate processor sets the event's own time
    receivedAt,
    caller: { account: caller.account, tenant: caller.tenant, team: caller.team, environment: caller.environment, keyId: caller.keyId },
    attribution: { ...EMPTY_ATTRIBUTION },
    attributed: false,
  } as UsageRecord
}

export const genaiFactory: ConnectorFactory<typeof schema> = {
  kind: 'connector',
  type: 'genai',
  description: 'GenAI spans and coding-assistant logs → usage records (traces and logs pipelines into usage pipelines)',
  connects: [
    ['traces', 'usage'],
    ['logs', 'usage'],
  ],
  schema,
  create: (settings, config, next) => new GenaiConnector(settings, config, next),
}
