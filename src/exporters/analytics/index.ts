import { ClickHouseAnalytics } from '../../adapters/clickhouse/analytics.js'
import { findClickHouse } from '../../adapters/clickhouse/registry.js'
import type { ConsumingComponent, CreateSettings, ExporterFactory, Host } from '../../host/component.js'
import type { Batch } from '../../core/consumer.js'
import { ApiError } from '../../core/errors.js'
import { idTimeMs, idTimePrefix } from '../../core/ids.js'
import { isUnpriced } from '../../domain/analytics/analytics-index.js'
import { AnalyticsIndex, publishAnalytics, withdrawAnalytics, type Analytics, type AnalyticsReader } from '../../domain/analytics/index.js'
import { PeerRows, readPeerRows, readRow, RowInput } from '../../domain/analytics/row.js'
import type { UsageRecord } from '../../model/usage-record.js'
import { embeddedReader } from './embedded.js'
import { analyticsGauges } from './metrics.js'
import { RecentIds } from './recent.js'
import { Rebuild } from './rebuild.js'
import { RepriceWatch } from './reprice-watch.js'
import { mountAnalyticsRoutes } from './routes.js'
import { analyticsDescriptor, type Config } from './descriptor.js'

/**
 * How far back, by the time in their ids, a worker looks at least for records another worker
 * stored and never announced when that worker dies (AnalyticsExporter.reconcile); further when
 * that worker had told of older ones (its floor). Alone it bounds only the read-back after a
 * worker that died before it told anything (within a second of this one joining it).
 */
const RECONCILE_WINDOW_MS = 5_000
/** A worker's floor trails its clock by this much while nothing older is on its way, so that a batch arriving late rarely has to lower it. */
const FLOOR_SLACK_MS = 1_000
/** Records read from the store per turn of the event loop while reconciling. */
const RECONCILE_CHUNK = 500

/**
 * Keeps every team's analytics in memory (src/domain/analytics), fed with each record once its
 * write unit has committed, and serves the analytics endpoints from it. At start the index is
 * read back from the stored records (src/exporters/analytics/rebuild.ts) while ingest goes on;
 * prices set later by `meterd reprice` are picked up by RepriceWatch.
 */
export class AnalyticsExporter implements ConsumingComponent, Analytics {
  readonly consumers
  readonly index = new AnalyticsIndex()
  reader?: AnalyticsReader
  private host?: Host
  private rebuild?: Rebuild
  private watch?: RepriceWatch
  /** The rows of the records this worker stored since the last announcement to the other workers. */
  private readonly outbox = new PeerRows()
  private readonly row = new RowInput()
  private announcing = false
  /** With other workers: the ids taken in lately, so a record reaches the index once (RecentIds). */
  private recent?: RecentIds
  private reconciling = Promise.resolve()
  private stopped = false
  /** With other workers: each batch of this worker's between its arrival here and its rows' announcement, by its oldest id. */
  private readonly unannounced = new Map<number, string>()
  private nextBatch = 0
  /** The floor the other workers were last told (ms since the epoch), and its id prefix. */
  private toldPrefix = ''
  /** What each other worker last told of its floor: every record it may have stored unannounced has an id made at or after it. */
  private readonly floors = new Map<number, number>()
  private floorTimer?: NodeJS.Timeout

  constructor(private readonly settings: CreateSettings, private readonly config: Config) {
    this.consumers = { usage: { consume: (b: Batch<UsageRecord>) => this.consume(b) } }
  }

  get ready(): boolean {
    if (this.config.backend === 'clickhouse') return this.host !== undefined
    return this.rebuild !== undefined && !this.rebuild.active && !this.rebuild.failed
  }

  whenReady(): Promise<void> {
    if (this.config.backend === 'clickhouse') return this.host ? Promise.resolve() : Promise.reject(new Error('the analytics exporter has not started'))
    return this.rebuild?.done ?? Promise.reject(new Error('the analytics exporter has not started'))
  }

  async start(host: Host): Promise<void> {
    this.host = host
    const logger = this.settings.logger
    if (this.config.backend !== 'clickhouse') {
      const peers = host.cluster.workers > 1
      this.rebuild = new Rebuild(host.usage, this.index, logger, peers)
      // Every worker answers the queries, so each adds what the others store too.
      if (peers) {
        // Kept a little longer than the window looked back at, and back to the oldest floor a
        // worker told: what a reconcile finds is still here.
        this.recent = new RecentIds(RECONCILE_WINDOW_MS + 2000, () => this.oldestFloor())
        host.cluster.subscribe(`${this.settings.id}.rows`, (bytes) => this.fromPeers(bytes as Uint8Array))
        host.cluster.subscribe(`${this.settings.id}.floor`, (data) => this.fromFloor(data))
        host.cluster.onPeerGone((peer) => this.peerGone(peer))
        host.cluster.onPeerRejoined((peer) => {
          this.reread(peer)
          // What it was told while cut off is lost: tell it again now.
          this.tellFloor()
        })
        this.tellFloor()
        this.floorTimer = setInterval(() => this.tellFloor(), 1000)
        this.floorTimer.unref()
      }
      this.watch = new RepriceWatch(host.usage, this.index, logger)
      this.rebuild.done.then(
        () => this.watch!.start(this.config.reprice_poll_ms),
        (err) => logger.error({ err }, 'analytics: reading the stored records failed; the analytics endpoints stay unavailable'),
      )
    }
    publishAnalytics(host.store, this.settings.id, this)
    analyticsGauges(this.settings.registry, this.settings.id, this)
    const reader = (this.reader = this.config.backend === 'clickhouse' ? this.clickhouseReader(host) : embeddedReader(host, this.index))
    if (this.config.query_api) mountAnalyticsRoutes(host, this, reader, { maxBuckets: this.config.max_buckets })
  }

  /**
   * The ClickHouse reader, found at the first query (exporters start in any order); a query
   * ClickHouse cannot answer now is a 503 with Retry-After, never a 500.
   */
  private clickhouseReader(host: Host): AnalyticsReader {
    let reader: ClickHouseAnalytics | undefined
    const id = this.config.clickhouse_exporter
    const logger = this.settings.logger
    const get = (): ClickHouseAnalytics => {
      if (reader) return reader
      const records = findClickHouse(host.store, id)
      if (!records) throw new ApiError(503, 'api_error', 'analytics_unavailable', `analytics reads the ClickHouse table of exporter ${id}, which is not running`, { headers: { 'Retry-After': '5' } })
      return (reader = new ClickHouseAnalytics(records.client, records.target))
    }
    const wrap =
      <A extends unknown[], R>(call: (r: ClickHouseAnalytics, ...a: A) => Promise<R>) =>
      async (...a: A): Promise<R> => {
        const r = get()
        try {
          return await call(r, ...a)
        } catch (err) {
          logger.warn({ err: (err as Error).message }, 'analytics: ClickHouse query failed')
          throw new ApiError(503, 'api_error', 'analytics_unavailable', 'ClickHouse did not answer the analytics query; retry shortly', { headers: { 'Retry-After': '5' } })
        }
      }
    return {
      agentsCost: wrap((r, team: string, q) => r.agentsCost(team, q)),
      toolsCostOverTime: wrap((r, team: string, q, interval) => r.toolsCostOverTime(team, q, interval)),
      traceCostDistribution: wrap((r, team: string, q, opts) => r.traceCostDistribution(team, q, opts)),
      traceList: wrap((r, team: string, q, o) => r.traceList(team, q, o)),
      traceRecords: wrap((r, team: string, traceId: string) => r.traceRecords(team, traceId)),
      providerStats: wrap((r, team: string, q, by) => r.providerStats(team, q, by)),
      totals: wrap((r, team: string, q) => r.totals(team, q)),
    }
  }

  async shutdown(): Promise<void> {
    this.stopped = true
    clearInterval(this.floorTimer)
    this.announce()
    this.recent?.stop()
    this.rebuild?.stop()
    this.watch?.stop()
    if (this.host) withdrawAnalytics(this.host.store, this.settings.id)
  }

  /**
   * Adds the batch's records once they are committed (so their costs are the ones stored, and a
   * record the store kept an earlier twin of is known and skipped). Runs in the request path:
   * one row append per record, nothing else.
   */
  private async consume(batch: Batch<UsageRecord>): Promise<void> {
    // With ClickHouse the clickhouse exporter delivers the records; nothing is kept here.
    if (this.config.backend === 'clickhouse') return
    const before = this.rebuild!
    if (before.active) for (const r of batch.items) before.expect(r.id)
    const token = this.recent !== undefined ? this.arriving(batch.items) : -1
    // The write unit is created by whichever component writes first; once every branch of the
    // fan-out has been handed the batch (after this first await), it exists if anyone writes.
    await undefined
    const unit = batch.ctx.unit
    if (unit !== undefined) {
      try {
        await unit.commit()
      } catch {
        // Nothing was stored; the store's own branch reports the failure.
        for (const r of batch.items) this.rebuild!.forget(r.id)
        this.unannounced.delete(token)
        return
      }
    }
    // The index may have been read again meanwhile (reread): that read decides.
    const rebuild = this.rebuild!
    const duplicates = batch.ctx.duplicates
    const peers = this.host!.cluster.workers > 1
    const row = this.row
    let added = 0
    for (const r of batch.items) {
      if (duplicates?.has(r.id)) {
        rebuild.forget(r.id)
        continue
      }
      let counts = false
      try {
        counts = readRow(r, row)
        const unpriced = counts && isUnpriced(r)
        if (counts && peers) this.stored(r.id, r.caller.team, unpriced)
        if (!rebuild.committed(r.id) || !counts) continue
        if (this.recent !== undefined && !this.recent.claim(r.id)) continue
        this.index.addRow(r.caller.team, r.id, unpriced, row)
        added++
      } catch (err) {
        // The record is stored: failing the request now would answer 503 for it. It is counted
        // again from the store at the next start.
        this.settings.metrics.failed(1)
        this.settings.logger.error({ err, id: r.id }, 'analytics: a stored record could not be added to the index')
      }
    }
    // Their rows are queued (stored): the announcement, a microtask, goes before any timer tells a floor past them.
    this.unannounced.delete(token)
    this.settings.metrics.accepted(added)
  }

  /**
   * A batch of this worker's arrives, before its commit: while it is unannounced, the floor the
   * other workers know must not be above its oldest id. If it is (its records were made before
   * the floor last told, e.g. delayed on their way), they are told a lower one now, ahead of the
   * commit on the same ordered channel as the rows. Returns the batch's token.
   */
  private arriving(items: UsageRecord[]): number {
    if (items.length === 0) return -1
    let oldest = items[0].id
    for (let i = 1; i < items.length; i++) if (items[i].id < oldest) oldest = items[i].id
    const token = this.nextBatch++
    this.unannounced.set(token, oldest)
    // An id made before the floor's millisecond sorts before its prefix.
    if (oldest < this.toldPrefix) this.tell(idTimeMs(oldest))
    return token
  }

  /** Every second (and at start): tells the other workers this worker's floor, its oldest unannounced record or FLOOR_SLACK_MS ago. */
  private tellFloor(): void {
    let floor = Date.now() - FLOOR_SLACK_MS
    for (const id of this.unannounced.values()) floor = Math.min(floor, idTimeMs(id))
    this.tell(floor)
  }

  private tell(ms: number): void {
    this.toldPrefix = idTimePrefix(ms)
    this.host!.cluster.publish(`${this.settings.id}.floor`, [this.host!.cluster.index, ms])
  }

  private fromFloor(data: unknown): void {
    const [peer, ms] = data as [unknown, unknown]
    if (typeof peer === 'number' && typeof ms === 'number') this.floors.set(peer, ms)
  }

  /** The oldest floor another worker told, or one a read-back still looks back to (RecentIds keeps ids taken in since). */
  private oldestFloor(): number {
    let oldest = Infinity
    for (const ms of this.floors.values()) oldest = Math.min(oldest, ms)
    return oldest
  }

  /**
   * A worker's connections all closed (it died, or one of the two dropped the other): its records
   * stored but unannounced are read back from its last floor (at least RECONCILE_WINDOW_MS back).
   * The floor stays in `floors` until the read-back is done, so RecentIds keeps what it may meet.
   */
  private peerGone(peer: number): void {
    const from = Math.min(this.floors.get(peer) ?? Infinity, Date.now() - RECONCILE_WINDOW_MS)
    this.floors.set(peer, from)
    this.reconciling = this.reconciling
      .then(() => this.reconcile(peer, from))
      .finally(() => {
        // Unless it told a new floor meanwhile (joined again).
        if (this.floors.get(peer) === from) this.floors.delete(peer)
      })
  }

  /**
   * Queues the row just read for the other workers, to go out before the record's 201: the
   * announcement is a microtask queued now, ahead of the ones that resolve the request and write
   * its answer. A worker killed after answering has handed its rows to the kernel already (the
   * peers' sockets, src/core/cluster/peers.ts), so no other worker misses a record it
   * acknowledged. The records of one commit come back in one wave of microtasks, so they go out
   * in one message: one per commit, not one per record.
   */
  private stored(id: string, team: string, unpriced: boolean): void {
    this.outbox.push(id, team, unpriced, this.row)
    if (this.announcing) return
    this.announcing = true
    queueMicrotask(() => this.announce())
  }

  /** Sends the queued rows to the other workers, as one message (row.ts). */
  private announce(): void {
    this.announcing = false
    if (this.outbox.empty) return
    this.host!.cluster.publish(`${this.settings.id}.rows`, this.outbox.take())
  }

  /** Rows of records other workers committed, added as they sent them (nothing is read from the store). */
  private fromPeers(bytes: Uint8Array): void {
    const rebuild = this.rebuild!
    const row = this.row
    try {
      readPeerRows(bytes, row, (id, team, unpriced) => {
        if (rebuild.fromPeer(id) && this.recent!.claim(id)) this.index.addRow(team, id, unpriced, row)
      })
    } catch (err) {
      this.settings.logger.error({ err }, 'analytics: rows from another worker could not be added to the index')
    }
  }

  /**
   * A worker this one was cut off from (one of the two dropped the other for not reading) sends
   * and is sent to again: the rows either announced in between never arrived, and which they were
   * cannot be told (a record's id says when it arrived, not when its commit or its rows went out).
   * So the index is read from the store again, as at a start: from a snapshot taken now, when
   * both send to each other again, so that every record is counted once, by the scan (in the
   * snapshot) or as it arrives (committed after it). The queries answer 503 meanwhile. Rare: a
   * worker is dropped only once 64 MiB of rows wait for it unread.
   */
  private reread(peer: number): void {
    if (this.stopped) return
    this.settings.logger.warn({ peer }, 'analytics: cut off from another worker for a while; reading the stored records again')
    this.rebuild!.stop()
    this.index.clear()
    const rebuild = (this.rebuild = new Rebuild(this.host!.usage, this.index, this.settings.logger, true))
    rebuild.done.catch((err) => this.settings.logger.error({ err }, 'analytics: reading the stored records again failed; the analytics endpoints stay unavailable'))
  }

  /**
   * Another worker died: the records of its last commits may be stored without their rows having
   * been sent (a kill between a commit and the message that follows it, which a stalled disk can
   * make long). Every record stored with an id made at or after `fromMs` (the dead worker's floor:
   * older than any of its unannounced records) that this worker has not taken in is added from
   * the store now. The dead worker's commits are final by then; a live worker's record found here
   * is skipped when its row arrives (RecentIds), and one in the snapshot of this worker's own
   * start-up read is left to that read.
   */
  private async reconcile(peer: number, fromMs: number): Promise<void> {
    const recent = this.recent!
    const row = this.row
    let after: string | undefined = idTimePrefix(fromMs)
    let added = 0
    try {
      // Stopping (the store closes next): what is left is counted at the next start.
      while (after !== undefined && !this.stopped) {
        let last: string | undefined
        for (const r of this.host!.usage.scan(after, RECONCILE_CHUNK)) {
          last = r.id
          // (this.rebuild: the index may be read again meanwhile, from a snapshot of its own.)
          if (!this.rebuild!.fromPeer(r.id) || !recent.claim(r.id)) continue
          if (!readRow(r, row)) continue
          this.index.addRow(r.caller.team, r.id, isUnpriced(r), row)
          added++
        }
        after = last
        if (after !== undefined) await new Promise((resolve) => setImmediate(resolve))
      }
    } catch (err) {
      this.settings.logger.error({ err, peer }, 'analytics: the records of a worker that died could not be read back; they are counted at the next start')
      return
    }
    if (added > 0) this.settings.logger.info({ peer, added }, 'analytics: records of a worker that died, stored but not announced, added from the store')
  }
}

export const analyticsFactory: ExporterFactory<typeof analyticsDescriptor.schema> = {
  ...analyticsDescriptor,
  create: (settings, config) => new AnalyticsExporter(settings, config),
}
