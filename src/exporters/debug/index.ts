import type { ConsumingComponent, CreateSettings, ExporterFactory } from '../../host/component.js'
import type { Batch } from '../../core/consumer.js'
import { debugDescriptor, type Config } from './descriptor.js'

/** Logs what it receives through pino; for trying out a pipeline. */
export class DebugExporter implements ConsumingComponent {
  readonly consumers

  constructor(private readonly settings: CreateSettings, private readonly config: Config) {
    const consume = async (batch: Batch<unknown>): Promise<void> => {
      // Log what was stored: the costs a pricing step sets exist once the write unit ran.
      await batch.ctx.unit?.commit()
      if (this.config.verbosity === 'detailed') for (const item of batch.items) this.settings.logger.info({ item }, 'debug exporter')
      else this.settings.logger.info({ items: batch.items.length }, 'debug exporter')
      this.settings.metrics.accepted(batch.items.length)
    }
    this.consumers = { usage: { consume }, traces: { consume }, logs: { consume }, metrics: { consume } }
  }

  async start(): Promise<void> {}
  async shutdown(): Promise<void> {}
}

export const debugFactory: ExporterFactory<typeof debugDescriptor.schema> = {
  ...debugDescriptor,
  create: (settings, config) => new DebugExporter(settings, config),
}
