/**
 * One replica of a gateway cluster at a time does the cluster's own duties (alert evaluation):
 * the holder of a lease in the shared store, renewed while it lives. Standalone and sidecar
 * daemons need none (the worker leader of the daemon does them: core/cluster/bus.ts).
 */
export interface Leadership {
  /** True while this replica holds the lease (and has renewed it within two thirds of its length). */
  readonly leader: boolean
}

/**
 * What each replica measured of an alert rule over its own records, and what the leader reads of
 * all of them: one entry per replica, replaced at each of its evaluations, gone after `ttlMs`.
 */
export interface AlertMeasures {
  publish(ruleId: string, replica: string, value: string, ttlMs: number): Promise<void>
  /** Every replica's latest entry for the rule. Rejects with the 503 `shared_state_unavailable` when the shared store is gone. */
  gather(ruleId: string): Promise<string[]>
}
