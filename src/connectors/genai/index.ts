import type { ConnectorFactory, ConsumingComponent, CreateSettings, Host, SignalConsumers } from '../../host/component.js'
import type { Batch, Consumer, ItemRejection } from '../../core/consumer.js'
import { PermanentError } from '../../core/errors.js'
import { Ingest, type IngestItem } from '../../domain/ingest/index.js'
import { ToolRegistry } from '../../domain/tools/registry.js'
import type { LogItem, SpanItem } from '../../model/otlp.js'
import { checkBody } from '../../model/schemas.js'
import type { Caller, UsageRecord } from '../../model/usage-record.js'
import { apiKeyNames } from './attribution.js'
import type { MapSettings, Mapped } from './build.js'
import { mapLog } from './logs.js'
import { SPAN_USAGE_PREFIXES, mapSpan } from './spans.js'
import { ItemRejected } from './view.js'
import { genaiDescriptor, type Config } from './descriptor.js'

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
  private ingest?: Ingest
  private readonly usage: Consumer<UsageRecord>
  private registry?: ToolRegistry
  private readonly prefixes: readonly string[]
  private readonly drop: readonly string[]
  private readonly apiKeys: readonly string[]
  private readonly dedupWindowMs: number

  constructor(private readonly settings: CreateSettings, config: Config, next: SignalConsumers) {
    if (!next.usage) throw new Error('the genai connector feeds usage pipelines only')
    this.usage = next.usage
    this.dedupWindowMs = config.dedup_window_hours * 3_600_000
    this.prefixes = config.attribute_prefixes
    this.drop = config.drop_attributes
    this.apiKeys = apiKeyNames(config.attribute_prefixes)
    this.consumers = {
      traces: { consume: (batch: Batch<SpanItem>) => this.convert(batch, (item, s) => mapSpan(item, s)), spanInterest: { attributePrefixes: SPAN_USAGE_PREFIXES } },
      logs: { consume: (batch: Batch<LogItem>) => this.convert(batch, (item, s, now) => mapLog(item, s, now)) },
    }
  }

  async start(host: Host): Promise<void> {
    this.host = host
    // Records from OTLP are deduplicated like REST ones, by transactionId per team and kind,
    // sharing the in-flight table of every receiver on this store (src/domain/ingest).
    this.ingest = new Ingest(host.usage, this.usage, {
      receiver: this.settings.id,
      dedupWindowMs: this.dedupWindowMs,
      idempotencyTtlMs: 0,
      metrics: this.settings.metrics,
      now: () => host.now(),
      shared: host.shared?.dedup,
    })
    for (const ext of host.extensions().values()) {
      const registry = (ext as { registry?: unknown }).registry
      if (registry instanceof ToolRegistry) this.registry = registry
    }
  }

  async shutdown(): Promise<void> {}

  private async convert<T>(batch: Batch<T>, map: (item: T, s: MapSettings, now: number) => Mapped | undefined): Promise<void> {
    const now = this.host ? this.host.now() : Date.now()
    const caller = batch.ctx.caller ?? NO_CALLER
    const registry = this.registry
    const settings: MapSettings = {
      prefixes: this.prefixes,
      drop: this.drop,
      apiKeys: this.apiKeys,
      isRegisteredTool: (toolId) => registry !== undefined && caller.team !== '' && registry.byToolId(caller.team, toolId) !== undefined,
    }
    const items: IngestItem[] = []
    const rejected: ItemRejection[] = []
    // The receiver may have passed over the spans this connector does not read (spanInterest).
    const positions = batch.ctx.filtered?.positions
    const offered = batch.ctx.filtered?.count ?? batch.items.length
    for (let i = 0; i < batch.items.length; i++) {
      let mapped: Mapped | undefined
      try {
        mapped = map(batch.items[i], settings, now)
        if (!mapped) continue
        const problem = checkBody(mapped.kind, mapped.body)
        if (problem) throw new ItemRejected(problem.message)
      } catch (err) {
        if (!(err instanceof ItemRejected)) throw err
        rejected.push({ index: positions ? positions[i] : i, message: err.message })
        continue
      }
      items.push({ kind: mapped.kind, body: mapped.body })
    }
    if (rejected.length) {
      this.settings.metrics.refused(rejected.length)
      ;(batch.ctx.rejected ??= []).push(...rejected)
      if (rejected.length === offered) {
        const first = rejected[0]
        const more = rejected.length > 1 ? ` (and ${rejected.length - 1} more)` : ''
        throw new PermanentError(`item ${first.index}: ${first.message}${more}`, 'invalid_otlp_items', undefined, first.index)
      }
    }
    if (!items.length) return
    // Ingest stores the records once each (a retried export, or a batch repeating a record, is
    // answered by the ids already stored) and resolves once they are durable.
    await this.ingest!.submit(caller, items)
  }
}

export const genaiFactory: ConnectorFactory<typeof genaiDescriptor.schema> = {
  ...genaiDescriptor,
  create: (settings, config, next) => new GenaiConnector(settings, config, next),
}
