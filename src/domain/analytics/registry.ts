import type { Store } from '../../store/store.js'
import type { AnalyticsIndex } from './analytics-index.js'
import type { AnalyticsReader } from './reader.js'

/**
 * Where other components find the analytics of a running daemon (the alert evaluator, the
 * dashboard's server side): the analytics exporter publishes its index under its component id,
 * per store, and components look it up instead of importing the exporter.
 */
const published = new WeakMap<Store, Map<string, Analytics>>()

export interface Analytics {
  /** The in-memory index; empty when the exporter answers from ClickHouse (`backend: clickhouse`). */
  readonly index: AnalyticsIndex
  /** The questions, answered by whichever backend the exporter is configured with; set once it started. */
  readonly reader?: AnalyticsReader
  /** False while the exporter is still reading the stored records after a start. */
  readonly ready: boolean
  /** Resolves once ready. */
  whenReady(): Promise<void>
}

export function publishAnalytics(store: Store, id: string, analytics: Analytics): void {
  let m = published.get(store)
  if (!m) published.set(store, (m = new Map()))
  m.set(id, analytics)
}

export function withdrawAnalytics(store: Store, id: string): void {
  published.get(store)?.delete(id)
}

/** The analytics of exporter `id` (default `analytics`) on this store, if it runs. */
export function findAnalytics(store: Store, id = 'analytics'): Analytics | undefined {
  return published.get(store)?.get(id)
}
