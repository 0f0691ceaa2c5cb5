import { Type } from '@sinclair/typebox'
import type { ConnectorFactory, ConsumingComponent, SignalConsumers } from '../../host/component.js'
import { SIGNALS, type Batch } from '../../core/consumer.js'

const schema = Type.Object({}, { additionalProperties: false })

/** Passes a signal from one pipeline into others of the same signal (the Collector's forward connector). */
export const forwardFactory: ConnectorFactory<typeof schema> = {
  kind: 'connector',
  type: 'forward',
  description: 'Joins pipelines of one signal: exporter of one, receiver of others',
  connects: SIGNALS.map((s) => [s, s] as const),
  schema,
  create: (_settings, _config, next): ConsumingComponent => {
    const consumers: SignalConsumers = {}
    for (const s of SIGNALS) {
      const target = next[s]
      if (target) consumers[s] = { consume: (batch: Batch<unknown>) => target.consume(batch) }
    }
    return { consumers, start: async () => {}, shutdown: async () => {} }
  },
}
