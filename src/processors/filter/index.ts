import type { CreateSettings, ProcessorFactory } from '../../host/component.js'
import type { Batch, Consumer, Signal } from '../../core/consumer.js'
import { partOf, select } from '../../core/part.js'
import { tally } from '../../core/telemetry.js'
import { FIELD_CATALOGS, compileCondition, type Predicate } from '../../domain/conditions/index.js'
import { filterDescriptor, type Config } from './descriptor.js'

/**
 * Keeps or drops records by a condition. A dropped record was accepted and deliberately not
 * kept: the request is still answered 201 (with the record's id, which no store then holds), and
 * the record is counted in meterd_filter_dropped_items_total for this processor.
 */
export class FilterProcessor implements Consumer<unknown> {
  private readonly dropped: (n: number) => void
  private readonly keeps: Predicate

  constructor(private readonly settings: CreateSettings, config: Config, signal: Signal, private readonly next: Consumer<unknown>) {
    const when = compileCondition(config.keep ?? config.drop!, FIELD_CATALOGS[signal]!)
    this.keeps = config.keep !== undefined ? when : (item) => !when(item)
    const [processor, pipeline = ''] = settings.id.split('@')
    this.dropped = tally(settings.registry, 'meterd_filter_dropped_items_total', 'Items a filter processor dropped (answered as accepted, not kept)', ['processor', 'pipeline']).bind({ processor, pipeline })
  }

  async start(): Promise<void> {}
  async shutdown(): Promise<void> {}

  async consume(batch: Batch<unknown>): Promise<void> {
    const { items } = batch
    const kept = select(items, this.keeps)
    if (!kept) {
      this.settings.metrics.accepted(items.length)
      return this.next.consume(batch)
    }
    this.dropped(items.length - kept.items.length)
    this.settings.metrics.accepted(kept.items.length)
    if (kept.items.length === 0) return
    const { part, settle } = partOf(batch, kept.items, kept.index)
    try {
      await this.next.consume(part)
    } finally {
      settle()
    }
  }
}

export const filterFactory: ProcessorFactory<typeof filterDescriptor.schema> = {
  ...filterDescriptor,
  create: (settings, config, signal, next) => new FilterProcessor(settings, config, signal, next),
}
