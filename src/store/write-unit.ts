import type { WriteStep, WriteUnit } from '../ports/write-unit.js'
import type { Environment } from './environment.js'

/**
 * One request's writes, from every component that stores something for it (the pricing
 * processor's tool aggregates, the lmdb exporter's record and indexes, the webhook exporter's
 * deliveries), committed in one LMDB transaction: after a crash all of it is on disk or none
 * of it is, and a request pays for one commit instead of one per component.
 *
 * Components add their steps while the batch passes through them (synchronously, before their
 * first `await`), and every component that must know the outcome awaits `commit()`. The first
 * `commit()` queues the unit; lmdb-js runs it with the other requests' units in its next write
 * transaction, the units committed meanwhile in one transaction callback (Store.commitUnit).
 * Steps run in the order they were added: processors before exporters, so an exporter's step
 * sees the costs a pricing step set.
 *
 * A step must check what it can before its first put: units share lmdb-js's batched
 * transaction without child transactions (a nested transaction per request cost ~15% of the
 * ingest CPU), so a step that throws stops its unit (later steps are skipped, `commit()`
 * rejects) but cannot take back the puts it already made.
 */
export class LmdbWriteUnit implements WriteUnit {
  private readonly steps: WriteStep[] = []
  private running = false
  private done?: Promise<void>
  private durable = false
  private refusal?: Error

  constructor(private readonly store: Environment) {}

  add(step: WriteStep): void {
    // A step added once the transaction ran would silently miss it: a programming error.
    if (this.running) throw new Error('a write step was added after its unit was committed')
    this.steps.push(step)
  }

  /**
   * Whether `commit()` has resolved: a component that runs after one that awaited the commit
   * (ingest, after the lmdb exporter) need not await it again.
   */
  get committed(): boolean {
    return this.durable
  }

  refuse(err: Error): boolean {
    // lmdb-js runs the transaction callback in a later turn of the event loop, never inside
    // commit(): a branch of the same fan-out refuses before it.
    if (this.running) return false
    this.refusal ??= err
    return true
  }

  refusedWith(err: unknown): boolean {
    return err !== undefined && err === this.refusal
  }

  /** Resolves once every step has run and the transaction is on disk; rejects (for every caller) if a step threw. */
  commit(): Promise<void> {
    return (this.done ??= this.store.commitUnit(
      () => {
        if (this.refusal) throw this.refusal
        this.running = true
        for (const step of this.steps) step()
      },
      () => (this.durable = true),
    ))
  }
}
