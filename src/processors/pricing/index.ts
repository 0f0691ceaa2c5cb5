import type { CreateSettings, Host, ProcessorFactory } from '../../host/component.js'
import { unitOf, type Batch, type Consumer } from '../../core/consumer.js'
import { PermanentError } from '../../core/errors.js'
import { sharedCounter, tally, type Tally } from '../../core/telemetry.js'
import type { Counted, ToolCharge } from '../../ports/tiers.js'
import { ToolsExtension } from '../../extensions/tools/index.js'
import { ToolRegistry } from '../../domain/tools/registry.js'
import type { Tool } from '../../domain/tools/tool.js'
import type { ToolRecord, UsageRecord } from '../../model/usage-record.js'
import { ToolAggregates } from '../../domain/pricing/aggregates.js'
import { MediaPriceBook, priceMedia } from '../../domain/pricing/media-price-book.js'
import { PriceBook, priceCompletion } from '../../domain/pricing/price-book.js'
import { disabledTool, quantityTooLarge, toolCharge, toolCost, unknownTool, type ToolPricingOptions } from '../../domain/pricing/tool-pricing.js'
import { applyOnce, countOnce } from './copies.js'
import { loadMediaPriceBook, loadPriceBook, pricingDescriptor, toolOptions, type PricingConfig } from './descriptor.js'

/** The registry a process prices tool events by: the tools extension's, else the stored tools alone. */
export function findRegistry(host: Host): ToolRegistry {
  for (const ext of host.extensions().values()) if (ext instanceof ToolsExtension && ext.registry) return ext.registry
  return new ToolRegistry(host.store)
}

/**
 * Puts a cost on every record (DESIGN §6): completions from the price book, images, audio and
 * video from the media price book, tool events from
 * the tool registry with period aggregates. Tool aggregates are updated in their own LMDB write
 * transaction before the batch moves on; it commits before the record's transaction, and LMDB
 * flushes commits in order, so the record's durable write makes both durable (docs/pricing.md).
 */
export class PricingProcessor implements Consumer {
  private host?: Host
  private book?: PriceBook
  private media?: MediaPriceBook
  private registry?: ToolRegistry
  private aggregates?: ToolAggregates
  private readonly tools: ToolPricingOptions
  private readonly unpriced: Tally
  private readonly priced: Tally
  private readonly givenBackFailed: { inc(): void }

  constructor(private readonly settings: CreateSettings, private readonly config: PricingConfig, private readonly next: Consumer) {
    this.tools = toolOptions(config)
    this.unpriced = tally(settings.registry, 'meterd_unpriced_records_total', 'Records stored without a price (unknown model or toolId)', ['kind', 'reason'])
    this.priced = tally(settings.registry, 'meterd_priced_records_total', 'Records by where their cost came from', ['kind', 'source'])
    this.givenBackFailed = sharedCounter(settings.registry, 'meterd_tier_give_back_failures_total', 'Failed requests whose shared tier quantities Redis did not take back at once (gateway; given back once it answers)', [])
  }

  async start(host: Host): Promise<void> {
    this.host = host
    this.book = loadPriceBook(this.config)
    this.media = loadMediaPriceBook(this.config)
    this.registry = findRegistry(host)
    this.aggregates = new ToolAggregates(host.store)
    this.settings.logger.debug({ models: this.book.size, version: this.book.version }, 'price book loaded')
  }

  async shutdown(): Promise<void> {}

  async consume(batch: Batch<UsageRecord>): Promise<void> {
    const book = this.book!
    let charges: ToolCharge[] | undefined
    let pending: { r: ToolRecord; tool: Tool }[] | undefined
    this.refuseQuantitiesTooLarge(batch)
    for (const r of batch.items) {
      if (r.kind === 'completion') {
        r.cost = priceCompletion(book, r.body)
      } else if (r.kind !== 'tool') {
        r.cost = priceMedia(this.media!, r.kind, r.body)
      } else {
        const tool = this.registry!.byToolId(r.caller.team, r.body.toolId)
        if (!tool) r.cost = unknownTool()
        else if (!tool.enabled) r.cost = disabledTool(tool)
        else {
          ;(charges ??= []).push(toolCharge(r, tool, this.tools))
          ;(pending ??= []).push({ r, tool })
          continue
        }
      }
      this.count(r)
    }
    // Set when the request's records went down several pipelines: each moves the tiers once (./copies.ts).
    const copies = batch.ctx.copies
    if (charges && pending && this.host!.shared) {
      // Gateway cluster: the aggregates are shared in Redis and move before the record is stored
      // (docs/deployment.md). A failure to reach Redis fails the request (503), nothing priced twice.
      const tiers = this.host!.shared.tiers
      const now = this.host!.now()
      const counted = copies === undefined ? await tiers.count(charges, now) : await countOnce(tiers, copies, charges, pending, now, this.giveBack)
      pending.forEach(({ r, tool }, i) => {
        r.cost = toolCost(r, tool, counted.applied[i])
        this.count(r)
      })
      this.settings.metrics.accepted(batch.items.length)
      return this.storeOrGiveBack(batch, counted)
    } else if (charges && pending) {
      // The aggregates move in the request's write unit, in the same transaction as the record
      // (one commit, and never one without the other); the costs are known once the unit ran,
      // before any later step (the record's, the webhook deliveries') reads them.
      const aggregates = this.aggregates!
      const now = this.host!.now()
      const toolCharges = charges
      const toolRecords = pending
      const dedupWindowMs = batch.ctx.dedupWindowMs
      unitOf(batch, this.host!.store).add(() => {
        const applied = copies === undefined ? aggregates.applyInTransaction(toolCharges, now, dedupWindowMs) : applyOnce(aggregates, copies, toolCharges, toolRecords, now, dedupWindowMs)
        toolRecords.forEach(({ r, tool }, i) => {
          r.cost = toolCost(r, tool, applied[i])
          this.count(r)
        })
      })
    }
    this.settings.metrics.accepted(batch.items.length)
    return this.next.consume(batch)
  }

  /** A 400 for a batch in which an event would count a quantity past MAX_QUANTITY; before anything is priced or counted. */
  private refuseQuantitiesTooLarge(batch: Batch<UsageRecord>): void {
    for (let i = 0; i < batch.items.length; i++) {
      const r = batch.items[i]
      if (r.kind !== 'tool' || !r.body.usageMetadata) continue
      const tool = this.registry!.byToolId(r.caller.team, r.body.toolId)
      const tooLarge = tool?.enabled ? quantityTooLarge(r, tool) : undefined
      if (tooLarge) {
        this.settings.metrics.refused(batch.items.length)
        throw new PermanentError(tooLarge.message, 'invalid_field', tooLarge.param, batch.items.length > 1 ? i : undefined)
      }
    }
  }

  /**
   * Gateway cluster: the rest of the pipeline, and the request's write unit; when the records were
   * not stored after all (the commit failed, an exporter refused before it), the quantities they
   * counted are given back, so the period holds what was stored and the client's retry is priced
   * as if this attempt never happened. Records that did commit keep their count, even when a later
   * exporter fails the request: they are stored, and a retry finds them by transactionId.
   */
  private async storeOrGiveBack(batch: Batch<UsageRecord>, counted: Counted): Promise<void> {
    try {
      await this.next.consume(batch)
      await batch.ctx.unit?.commit()
    } catch (err) {
      const unit = batch.ctx.unit
      const stored = unit !== undefined && (await unit.commit().then(() => true, () => false))
      if (!stored) await this.giveBack(counted)
      throw err
    }
  }

  /**
   * Gives a failed request's tier moves back; a give-back Redis does not answer is logged and
   * counted, not thrown (the shared tier quantities give it back once Redis answers).
   */
  private readonly giveBack = (counted: Counted): Promise<void> =>
    counted.giveBack().catch((e) => {
      this.givenBackFailed.inc()
      this.settings.logger.warn({ err: e }, 'a failed request\'s tier quantities could not be given back yet: they go back once the shared state answers')
    })

  private count(r: UsageRecord): void {
    const c = r.cost!
    if (c.source === 'unpriced') this.unpriced.inc({ kind: r.kind, reason: c.note ?? 'unknown' })
    this.priced.inc({ kind: r.kind, source: c.source })
  }
}

export const pricingFactory: ProcessorFactory<typeof pricingDescriptor.schema> = {
  ...pricingDescriptor,
  create: (settings, config, _signal, next) => new PricingProcessor(settings, config, next),
}
