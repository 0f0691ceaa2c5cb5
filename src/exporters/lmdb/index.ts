import type { ConsumingComponent, CreateSettings, ExporterFactory, Host } from '../../host/component.js'
import { unitOf, type Batch } from '../../core/consumer.js'
import { RetryableError, StoreUnwritableError } from '../../core/errors.js'
import type { UsageRecord } from '../../model/usage-record.js'
import { mountReadRoutes } from './read-api.js'
import { lmdbDescriptor, type Config } from './descriptor.js'

/**
 * The durable store (DESIGN §9): a batch resolves only after its LMDB transaction has
 * committed and been flushed, so a 201 upstream means the record survives kill -9.
 */
export class LmdbExporter implements ConsumingComponent {
  readonly consumers
  private host?: Host
  private sweeper?: NodeJS.Timeout

  constructor(private readonly settings: CreateSettings, private readonly config: Config) {
    this.consumers = { usage: { consume: (b: Batch<UsageRecord>) => this.consume(b) } }
  }

  async start(host: Host): Promise<void> {
    this.host = host
    if (this.config.query_api) mountReadRoutes(host)
    const retention = this.config.retention_hours * 3_600_000
    // One worker sweeps the shared store.
    if (!host.cluster.leader) return
    host.shared?.dedup.settleNoted()
    this.sweeper = setInterval(() => {
      host.usage.sweep(host.now(), retention).catch((err) => this.settings.logger.warn({ err }, 'replay sweep failed'))
    }, this.config.dedup_sweep_minutes * 60_000)
    this.sweeper.unref()
  }

  async shutdown(): Promise<void> {
    if (this.sweeper) clearInterval(this.sweeper)
  }

  private async consume(batch: Batch<UsageRecord>): Promise<void> {
    const host = this.host!
    const now = host.now()
    const idem = batch.ctx.idempotency
    const opts = {
      dedupWindowMs: batch.ctx.dedupWindowMs ?? this.config.retention_hours * 3_600_000,
      now,
      idempotency: idem && batch.ctx.caller
        ? { team: batch.ctx.caller.team, key: idem.key, bodyHash: idem.bodyHash, at: now, response: idem.response }
        : undefined,
    }
    // The records go in the request's write unit, after the steps of the processors before us.
    const unit = unitOf(batch, host.store)
    const usage = host.usage
    // Gateway cluster: the records' claims are noted with them, and settled even if this replica
    // cannot turn them into dedup entries before it answers (src/ports/dedup.ts).
    const shared = host.shared?.dedup
    unit.add(() => {
      const kept = usage.writeInTransaction(batch.items, opts)
      if (kept.size > 0) batch.ctx.duplicates = kept
      if (shared) shared.noteInTransaction(batch.items, opts.dedupWindowMs, kept)
    })
    try {
      await unit.commit()
    } catch (err) {
      if (unit.refusedWith(err)) throw err // another branch's queue is full: it counts the refusal
      this.settings.metrics.failed(batch.items.length)
      if (err instanceof StoreUnwritableError) throw err
      throw new RetryableError(`lmdb write failed: ${(err as Error).message}`, err)
    }
    this.settings.metrics.accepted(batch.items.length)
  }
}

export const lmdbFactory: ExporterFactory<typeof lmdbDescriptor.schema> = {
  ...lmdbDescriptor,
  create: (settings, config) => new LmdbExporter(settings, config),
}
