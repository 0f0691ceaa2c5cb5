import { statSync, statfsSync } from 'node:fs'
import { join } from 'node:path'
import { Gauge, type Registry } from 'prom-client'
import type { StorageConfig } from '../core/config/schema.js'
import type { Store } from './store.js'

/**
 * The data directory as Prometheus sees it, read at each scrape: the data file's size, the part
 * LMDB has used, the map's upper bound and the space left on the file system.
 */
export function storeGauges(registry: Registry, store: Store, storage: StorageConfig): void {
  const gauge = (name: string, help: string, read: () => number | undefined) => {
    registry.removeSingleMetric(name) // a registry shared by a second Service: this store's
    return new Gauge({
      name,
      help,
      registers: [registry],
      aggregator: 'max', // several workers see one data directory: the same value each
      collect() {
        const v = read()
        if (v !== undefined) this.set(v)
      },
    })
  }
  const attempt = (fn: () => number): number | undefined => {
    try {
      return fn()
    } catch {
      return undefined
    }
  }
  gauge('meterd_store_file_bytes', 'Size of the LMDB data file (data.mdb)', () => attempt(() => statSync(join(storage.path, 'data.mdb')).size))
  gauge('meterd_store_used_bytes', 'Bytes of the data file LMDB has used (up to its last page); the rest is space written ahead', () =>
    attempt(() => {
      const { lastPageNumber, pageSize } = store.root.getStats() as { lastPageNumber: number; pageSize: number }
      return (lastPageNumber + 1) * pageSize
    }),
  )
  // lmdb-js maps more when the data outgrows max_size_mb, so this is no bound on the file.
  gauge('meterd_store_max_bytes', 'storage.max_size_mb: the initial size of the memory map, not a bound (lmdb-js maps more as the data grows; watch the free space)', () => storage.max_size_mb * 1024 * 1024)
  gauge('meterd_store_filesystem_free_bytes', 'Space left for meterd on the file system of the data directory', () =>
    attempt(() => {
      const s = statfsSync(storage.path)
      return s.bavail * s.bsize
    }),
  )
}
