import type { ConnectorFactory, ConsumingComponent, SignalConsumers } from '../../host/component.js'
import { SIGNALS, type Batch } from '../../core/consumer.js'
import { forwardDescriptor } from './descriptor.js'

/** Passes a signal from one pipeline into others of the same signal (the Collector's forward connector). */
export const forwardFactory: ConnectorFactory<typeof forwardDescriptor.schema> = {
  ...forwardDescriptor,
  create: (_settings, _config, next): ConsumingComponent => {
    const consumers: SignalConsumers = {}
    for (const s of SIGNALS) {
      const target = next[s]
      if (target) consumers[s] = { consume: (batch: Batch<unknown>) => target.consume(batch) }
    }
    return { consumers, start: async () => {}, shutdown: async () => {} }
  },
}
