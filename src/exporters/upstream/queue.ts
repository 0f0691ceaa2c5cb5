import type { UsageKind } from '../../model/usage-record.js'
import { RecordQueue, type DeadEntry } from '../../store/record-queue.js'
import type { Store } from '../../store/store.js'

/** A record waiting for the upstream: the body to send and where to send it. */
export interface Queued {
  kind: UsageKind
  body: Record<string, unknown>
  /** When the sidecar acknowledged it (ms). */
  queuedAt: number
}

/** A record the upstream refused for good (a 4xx other than 401/403/404/408/409/429). */
export type DeadLetter = DeadEntry<Queued>

/** The upstream exporter's persistent queue (src/store/record-queue.ts). */
export class UpstreamQueue extends RecordQueue<Queued> {
  constructor(store: Store, name: string) {
    super(store, 'upstream', name)
  }
}
