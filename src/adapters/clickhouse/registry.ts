import type { ClickHouseClient } from '@clickhouse/client'
import type { Store } from '../../store/store.js'
import type { ClickHouseTarget } from './table.js'

/** A records table a clickhouse exporter fills, and the client it reaches it with. */
export interface ClickHouseRecords {
  client: ClickHouseClient
  target: ClickHouseTarget
}

// As the analytics registry: the clickhouse exporter publishes its table under its component
// id, per store, and the analytics exporter (backend: clickhouse) finds it there.
const published = new WeakMap<Store, Map<string, ClickHouseRecords>>()

export function publishClickHouse(store: Store, id: string, records: ClickHouseRecords): void {
  let m = published.get(store)
  if (!m) published.set(store, (m = new Map()))
  m.set(id, records)
}

export function withdrawClickHouse(store: Store, id: string): void {
  published.get(store)?.delete(id)
}

export function findClickHouse(store: Store, id: string): ClickHouseRecords | undefined {
  return published.get(store)?.get(id)
}
