import type { UsageRecord } from '../../model/usage-record.js'
import { costUnits, readRow, RowInput } from './row.js'
import { TeamIndex, type RowRef } from './team-index.js'

/**
 * Every team's analytics rows, kept in memory and fed with each record once it is committed
 * (src/exporters/analytics). Records stored unpriced are remembered by id, so that a price set
 * later by `meterd reprice` (another process) can be applied to their row in place.
 */
export class AnalyticsIndex {
  private readonly teams = new Map<string, TeamIndex>()
  private readonly unpriced = new Map<string, RowRef>()
  /** Records added since the last `takeAdded()`, stored unpriced. */
  private addedUnpriced = 0
  private readonly row = new RowInput()

  /** Forgets every row (before the stored records are read again). */
  clear(): void {
    this.teams.clear()
    this.unpriced.clear()
    this.addedUnpriced = 0
  }

  team(team: string): TeamIndex | undefined {
    return this.teams.get(team)
  }

  /** Adds a committed record; false when it does not count (its tool was disabled). */
  add(r: UsageRecord): boolean {
    if (!readRow(r, this.row)) return false
    this.addRow(r.caller.team, r.id, isUnpriced(r), this.row)
    return true
  }

  /** Adds a row already read (`readRow`) from committed record `id` of `team`. */
  addRow(team: string, id: string, unpriced: boolean, row: RowInput): void {
    let t = this.teams.get(team)
    if (t === undefined) this.teams.set(team, (t = new TeamIndex(team)))
    const ref = t.add(row)
    if (unpriced) {
      this.unpriced.set(id, ref)
      this.addedUnpriced++
    }
  }

  /** The record as stored now; a row still unpriced takes its new cost once it has one. */
  refresh(r: UsageRecord): void {
    const ref = this.unpriced.get(r.id)
    if (ref === undefined || r.cost?.source === 'unpriced') return
    ref.block.setCost(ref.row, costUnits(r))
    this.unpriced.delete(r.id)
  }

  /** A remembered unpriced record that is gone from the store. */
  forget(id: string): void {
    this.unpriced.delete(id)
  }

  isUnpriced(id: string): boolean {
    return this.unpriced.has(id)
  }

  unpricedIds(): IterableIterator<string> {
    return this.unpriced.keys()
  }

  get unpricedCount(): number {
    return this.unpriced.size
  }

  /** How many unpriced records were added since the last call. */
  takeAdded(): number {
    const n = this.addedUnpriced
    this.addedUnpriced = 0
    return n
  }

  /** Rows and bytes held (columns at capacity and tuple tables; interned strings not counted). */
  stats(): { teams: number; rows: number; bytes: number } {
    let rows = 0
    let bytes = 0
    for (const t of this.teams.values()) {
      rows += t.rows
      bytes += t.bytes
    }
    return { teams: this.teams.size, rows, bytes }
  }
}

/** Stored without a price (a later `meterd reprice` may set one). */
export function isUnpriced(r: UsageRecord): boolean {
  return r.cost?.source === 'unpriced'
}
