import type { ConsumingComponent, CreateSettings, ExporterFactory, Host } from '../../host/component.js'
import { unitOf, type Batch } from '../../core/consumer.js'
import { RetryableError } from '../../core/errors.js'
import type { UsageRecord } from '../../model/usage-record.js'
import { ExportConfigurations } from '../../extensions/exportconfigs/index.js'
import type { ExportConfiguration, WebhookEvent } from '../../domain/webhooks/model.js'
import { usageEvent, wants } from './events.js'
import { webhookDescriptor, type Config } from './descriptor.js'

/**
 * Turns usage records into webhook events for every matching export configuration of the
 * record's team. consume() resolves once the deliveries are durably queued (so the 201
 * upstream means they will be delivered, across kill -9); delivery itself is asynchronous.
 */
export class WebhookExporter implements ConsumingComponent {
  readonly consumers
  private ext?: ExportConfigurations
  private host?: Host

  constructor(private readonly settings: CreateSettings, private readonly config: Config) {
    this.consumers = { usage: { consume: (b: Batch<UsageRecord>) => this.consume(b) } }
  }

  async start(host: Host): Promise<void> {
    this.host = host
    const ext = host.getExtension(this.config.export_configurations)
    if (!(ext instanceof ExportConfigurations))
      throw new Error(`exporter ${this.settings.id}: extension "${this.config.export_configurations}" (exportconfigs) must be configured and listed in service.extensions`)
    this.ext = ext
  }

  async shutdown(): Promise<void> {}

  private async consume(batch: Batch<UsageRecord>): Promise<void> {
    const { store, engine } = this.ext!
    // Which configurations want which record is known now; the events are built in the
    // request's write unit, after the pricing step has set the costs they carry, and the
    // deliveries commit in the same transaction as the records.
    const wanted: { r: UsageRecord; configs: readonly ExportConfiguration[] }[] = []
    const names = this.config.configurations
    for (const r of batch.items) {
      let configs = store!.forTeam(r.caller.team)
      if (names.length > 0) configs = configs.filter((c) => names.includes(c.name))
      if (configs.length > 0) wanted.push({ r, configs })
    }
    if (wanted.length === 0) return
    let count = 0
    let afterCommit: (() => Promise<void>) | undefined
    const unit = unitOf(batch, this.host!.store)
    unit.add(() => {
      const items: { config: ExportConfiguration; event: WebhookEvent }[] = []
      // A record the store found already stored (its lmdb step ran before this one) was delivered then.
      const duplicates = batch.ctx.duplicates
      for (const { r, configs } of wanted) {
        if (duplicates?.has(r.id)) continue
        let event: WebhookEvent | undefined
        for (const c of configs) {
          if (!wants(c, r)) continue
          // One event per record, shared by every configuration it goes to: one id to dedup on.
          event ??= usageEvent(r, engine!.now())
          items.push({ config: c, event })
        }
      }
      count = items.length
      if (count > 0) afterCommit = engine!.enqueueInTransaction(items)
    })
    try {
      await unit.commit()
    } catch (err) {
      if (unit.refusedWith(err)) throw err // another branch's queue is full: it counts the refusal
      this.settings.metrics.failed(wanted.length)
      throw new RetryableError(`webhook queue write failed: ${(err as Error).message}`, err)
    }
    if (count > 0) this.settings.metrics.accepted(count)
    // The events are on disk: a batch flush that fails here is retried by the engine's next pass.
    await afterCommit?.().catch((err) => this.settings.logger.warn({ err }, 'webhook batch flush after enqueue failed'))
  }
}

export const webhookFactory: ExporterFactory<typeof webhookDescriptor.schema> = {
  ...webhookDescriptor,
  create: (settings, config) => new WebhookExporter(settings, config),
}
