/** A piece of a unit: runs inside the unit's write transaction (synchronously, reads and puts only). */
export type WriteStep = () => void

/**
 * One request's writes, from every component that stores something for it, committed as one
 * transaction (the LMDB adapter and its contract: src/store/write-unit.ts). Components add
 * their steps while the batch passes through them, synchronously, and every component that
 * must know the outcome awaits `commit()`.
 */
export interface WriteUnit {
  /** Throws once the unit's transaction has run: a step added then would be missed silently. */
  add(step: WriteStep): void
  /** Whether `commit()` has resolved: a component after one that awaited it need not await it again. */
  readonly committed: boolean
  /** Resolves once every step has run and the transaction is on disk; rejects (for every caller) if a step threw. */
  commit(): Promise<void>
  /**
   * Writes nothing of the unit: no step runs and `commit()` rejects with `err` for every caller.
   * A branch that cannot take a request (its queue is full) refuses the unit, so a sibling branch
   * does not store what the client is then told to send again (a retry would be answered from
   * dedup and never reach the branch that refused). False when the steps have already run.
   */
  refuse(err: Error): boolean
  /** Whether `err` is the refusal the unit was refused with: its writers pass it on as it is. */
  refusedWith(err: unknown): boolean
}

/** Where write units come from: the store (Store.unit()). */
export interface WriteUnits {
  unit(): WriteUnit
}

/** What carries a request's one write unit, made by the first component that writes: the batch's context (BatchContext.unit). */
export interface UnitCarrier {
  unit?: WriteUnit
}
