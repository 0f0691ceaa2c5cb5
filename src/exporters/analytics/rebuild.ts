import type { Logger } from 'pino'
import type { AnalyticsIndex } from '../../domain/analytics/index.js'
import type { RecordSnapshot, UsageRecords } from '../../ports/usage.js'

/** Where a record that arrived while the stored records were being read stands. */
type Live = 'expected' | 'applied' | 'scanned'

const CHUNK = 4096
/** How long the snapshot stays open after the scan, for peers' announcements still on their way. */
const SNAPSHOT_GRACE_MS = 5000

/**
 * Fills the index from the stored records at start (nothing is persisted: the records are the
 * truth, so after kill -9 nothing is missing and nothing counts twice). The read goes by record
 * id in chunks, yielding between them, so ingest is served meanwhile; the queries wait (503)
 * until it is done.
 *
 * A record that arrives meanwhile is added once its commit is done, and the scan may meet it
 * too, or not (it may commit behind the scan's position): `live` says which of the two added
 * it. Its entry is made before the commit, so the scan can never meet a record it does not know
 * is live.
 */
export class Rebuild {
  active = true
  /** The read failed: the index is incomplete and must not be answered from. */
  failed = false
  scanned = 0
  private readonly live = new Map<string, Live>()
  private stopped = false
  readonly done: Promise<void>
  /**
   * With other workers writing the same store, the scan reads one snapshot: a record they
   * commit is then either in it (the scan adds it) or not (their announcement does), never both.
   */
  private snapshot?: RecordSnapshot

  constructor(private readonly usage: UsageRecords, private readonly index: AnalyticsIndex, private readonly logger: Logger, peers = false) {
    if (peers) this.snapshot = usage.snapshot()
    this.done = this.run()
  }

  /** A record another worker committed and announced: true when the caller must add it (the scan does not). */
  fromPeer(id: string): boolean {
    return this.snapshot === undefined || !this.snapshot.has(id)
  }

  /** A live record, before its commit. */
  expect(id: string): void {
    if (this.active) this.live.set(id, 'expected')
  }

  /** A live record, after its commit: true when the caller must add it (the scan has not). */
  committed(id: string): boolean {
    const state = this.live.get(id)
    // Not expected: it was on its way before this read began (a read again, see
    // AnalyticsExporter.reread), and the snapshot has it if its commit came first.
    if (state === undefined) return this.fromPeer(id)
    if (state === 'scanned' || !this.active) this.live.delete(id)
    else this.live.set(id, 'applied')
    return state !== 'scanned'
  }

  /** A live record that was not stored (its commit failed, or the store kept an earlier twin). */
  forget(id: string): void {
    this.live.delete(id)
  }

  stop(): void {
    this.stopped = true
    this.release()
  }

  private release(): void {
    this.snapshot?.release()
    this.snapshot = undefined
  }

  private async run(): Promise<void> {
    const started = Date.now()
    let after: string | undefined
    try {
      while (!this.stopped) {
        let last: string | undefined
        for (const value of this.usage.scan(after, CHUNK, this.snapshot)) {
          const key = value.id
          last = key
          const state = this.live.get(key)
          if (state === 'applied') {
            this.live.delete(key) // the scan passes each id once
            continue
          }
          if (state === 'expected') this.live.set(key, 'scanned')
          this.index.add(value)
          this.scanned++
        }
        if (last === undefined) break
        after = last
        await new Promise((resolve) => setImmediate(resolve))
      }
    } catch (err) {
      this.failed = true
      throw err
    } finally {
      this.active = false
      for (const [id, state] of this.live) if (state === 'applied') this.live.delete(id)
      if (this.snapshot) setTimeout(() => this.release(), SNAPSHOT_GRACE_MS).unref()
    }
    const { rows, bytes } = this.index.stats()
    this.logger.info({ records: this.scanned, rows, mib: Math.round(bytes / 1048576), ms: Date.now() - started }, 'analytics: stored records read')
  }
}
