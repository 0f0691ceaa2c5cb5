import type { SharedDedup } from './dedup.js'
import type { DeliveryClaims } from './deliveries.js'
import type { AlertMeasures, Leadership } from './leader.js'
import type { SharedTables } from './tables.js'
import type { SharedTierQuantities } from './tiers.js'

/**
 * What replicas of a gateway cluster share (docs/deployment.md, Gateway). Standalone and sidecar
 * daemons have none of these: each piece is then this process's LMDB alone (DedupStore,
 * ToolAggregates, the extensions' own databases). The Redis adapters are in src/store/redis.
 */
export interface SharedState {
  readonly dedup: SharedDedup
  readonly tiers: SharedTierQuantities
  readonly tables: SharedTables
  readonly deliveries: DeliveryClaims
  readonly alertMeasures: AlertMeasures
  /** This replica (this process) among those sharing the state. */
  readonly replica: string
  /** The cluster's leader lease; this process competes for it from the first call (a replica's worker leader calls it). */
  lead(): Leadership
  /**
   * Settles what this replica owes the shared state (the tier moves of refused requests to give
   * back, the claims whose answer was lost to release), trying for `settleMs` at most (default 0: not
   * tried), then closes. What is left is logged: only this replica knew of it.
   */
  close(settleMs?: number): Promise<void>
}
