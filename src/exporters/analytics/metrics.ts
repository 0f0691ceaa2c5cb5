import { Gauge, type Registry } from 'prom-client'
import type { Analytics } from '../../domain/analytics/index.js'

const sources = new WeakMap<Registry, Map<string, Analytics>>()

/**
 * Gauges of every analytics exporter of a registry, read when /metrics is collected: rows held,
 * bytes their columns take (memory use, docs/analytics.md) and whether the start-up read is done.
 */
export function analyticsGauges(registry: Registry, id: string, analytics: Analytics): void {
  let mine = sources.get(registry)
  if (!mine) {
    sources.set(registry, (mine = new Map()))
    const all = mine
    // With several workers each holds the whole index: rows are one figure (max), memory adds up
    // (sum), and the daemon is ready when every worker is (min).
    const gauge = (name: string, help: string, aggregator: 'max' | 'sum' | 'min', value: (a: Analytics) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ['component'],
        registers: [registry],
        aggregator,
        collect() {
          for (const [component, a] of all) this.set({ component }, value(a))
        },
      })
    gauge('meterd_analytics_rows', 'Records the analytics index holds', 'max', (a) => a.index.stats().rows)
    gauge('meterd_analytics_bytes', 'Bytes of memory the analytics columns and tuple tables take (interned strings not counted)', 'sum', (a) => a.index.stats().bytes)
    gauge('meterd_analytics_ready', '1 once the stored records have been read back after a start (or, with workers, after being cut off from another worker)', 'min', (a) => (a.ready ? 1 : 0))
  }
  mine.set(id, analytics)
}
