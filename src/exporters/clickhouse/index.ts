import type { ClickHouseClient } from '@clickhouse/client'
import { Counter, type Registry } from 'prom-client'
import { instanceGauges } from '../../core/telemetry.js'
import { publishClickHouse, withdrawClickHouse } from '../../adapters/clickhouse/registry.js'
import { clientOf, encodeRow, ensureTable, insertLines, isMissingTable, quote, refusal, tableOf, withVersion, type ClickHouseTarget } from '../../adapters/clickhouse/table.js'
import type { ConsumingComponent, CreateSettings, ExporterFactory, Host } from '../../host/component.js'
import { unitOf, type Batch } from '../../core/consumer.js'
import { RetryableError, ThrottledError } from '../../core/errors.js'
import type { UsageRecord } from '../../model/usage-record.js'
import { Backoff, Nap } from '../../store/record-queue.js'
import { ClickHouseQueue, type QueuedRow } from './queue.js'
import { clickhouseDescriptor, type Config } from './descriptor.js'

/** Record ids per look-up query (an id is about 30 bytes quoted). */
const LOOKUP = 2000

/** A queued row as the sender handles it: its queue key, its record and version. */
interface Entry {
  key: string
  id: string
  version: number
  value: QueuedRow
}

/**
 * Usage records into a ClickHouse table (DESIGN §1: the gateway's records at scale). Each
 * record's row goes into a persistent LMDB queue in the request's own transaction — a 201
 * means it is queued — and a sender inserts the oldest rows in batches, retrying with backoff
 * until ClickHouse acknowledges. Exactly once: an insert whose outcome is unknown (it failed,
 * timed out, or the process stopped before the queue recorded the acknowledgement) is
 * followed by a look-up of which of its rows (record and version) the table already holds,
 * and only the others are inserted again. A record repriced later gets a new row, a higher
 * version, queued by `meterd reprice` (queue.ts). Rows ClickHouse refuses for good (the data
 * itself: table.ts refusal) are found by halving the batch and move to the dead letters; the
 * rest go on.
 */
export class ClickHouseExporter implements ConsumingComponent {
  readonly consumers
  private host?: Host
  private queue?: ClickHouseQueue
  private client?: ClickHouseClient
  private readonly target: ClickHouseTarget
  private readonly backoff: Backoff
  private stopped = true
  /** Whether the queue is refusing requests (full): its start and end are logged once each. */
  private refusing = false
  private loop?: Promise<void>
  /** The sender's wait between attempts: records and shutdown cut it short. */
  private readonly nap = new Nap(() => this.stopped || this.backoff.failures === 0)
  private abort = new AbortController()
  private tableReady = false
  /** The previous insert's outcome is unknown: check before inserting its records again. */
  private uncertain = true
  /** When the sender first saw the current partial batch (Date.now()). */
  private pendingSince?: number
  private readonly inserted: Counter
  private readonly errors: Counter

  constructor(private readonly settings: CreateSettings, private readonly config: Config) {
    this.consumers = { usage: { consume: (b: Batch<UsageRecord>) => this.consume(b) } }
    this.target = { endpoint: config.endpoint, username: config.username, password: config.password, database: config.database, table: config.table, timeoutMs: config.timeout_ms }
    this.backoff = new Backoff({ initialMs: config.initial_backoff_ms, maxMs: config.max_backoff_ms, jitter: config.jitter })
    const reg = settings.registry
    const counter = (name: string, help: string) => (reg.getSingleMetric(name) as Counter) ?? new Counter({ name, help, labelNames: ['exporter'], registers: [reg] })
    this.inserted = counter('meterd_clickhouse_inserted_records_total', 'Records ClickHouse acknowledged')
    this.errors = counter('meterd_clickhouse_insert_errors_total', 'Failed inserts (and failed table set-ups and look-ups); each is retried')
  }

  async start(host: Host): Promise<void> {
    this.host = host
    this.queue = new ClickHouseQueue(host.store, this.settings.id.replace('/', '_'))
    this.client = await clientOf(this.target)
    publishClickHouse(host.store, this.settings.id, { client: this.client, target: this.target })
    gaugesOf(this.settings.registry).add(this)
    this.stopped = false
    this.abort = new AbortController()
    // With several workers every one queues what it stores (one LMDB environment), and the
    // leader alone sends: two senders would insert the same rows side by side. It finds the
    // others' rows when it next looks (every flush_interval_ms).
    if (!host.cluster.leader) return
    this.loop = this.run()
    if (this.queue.depth) this.settings.logger.info({ queued: this.queue.depth }, 'clickhouse queue holds records from before the restart; inserting them')
  }

  /** What the queue gauges show for this exporter. */
  stats(): { id: string; depth: number; oldestAgeSeconds: number; dead: number } {
    const q = this.queue!
    return { id: this.settings.id, depth: q.depth, oldestAgeSeconds: q.oldestAge(this.host!.now()) / 1000, dead: q.deadLetters }
  }

  async shutdown(): Promise<void> {
    if (this.stopped) return
    this.stopped = true
    gaugesOf(this.settings.registry).delete(this)
    withdrawClickHouse(this.host!.store, this.settings.id)
    this.abort.abort()
    this.nap.wake()
    await this.loop
    await this.client?.close()
  }

  /**
   * The queue is full: the request is refused as a whole (the records are not stored by the other
   * branches either), so that the client's retry reaches this queue too instead of being answered
   * from dedup.
   */
  private full(batch: Batch<UsageRecord>, depth: number): ThrottledError {
    this.settings.metrics.refused(batch.items.length)
    if (!this.refusing) this.settings.logger.warn({ queued: depth, max: this.config.max_queue_records }, 'clickhouse queue full: requests are answered 503 until it drains')
    this.refusing = true
    const err = new ThrottledError(`the clickhouse queue is full (${depth} records)`, 1000)
    if (!unitOf(batch, this.host!.store).refuse(err))
      this.settings.logger.warn({ records: batch.items.length }, 'clickhouse queue full after another branch stored the records: they are not queued for ClickHouse')
    return err
  }

  private async consume(batch: Batch<UsageRecord>): Promise<void> {
    const queue = this.queue!
    if (queue.depth + batch.items.length > this.config.max_queue_records) throw this.full(batch, queue.depth)
    const now = this.host!.now()
    let n = 0
    unitOf(batch, this.host!.store).add(() => {
      // Rows are made here, inside the transaction: a tool event's cost is set by the pricing
      // step before this one (tier quantities are read and written in the same transaction).
      // A record the store kept an earlier twin of (dedup) is not a new record: the lmdb
      // exporter's step, listed before this one, has said which.
      // Every row is made before the first put: a step must not throw once it has written.
      const dup = batch.ctx.duplicates
      const rows: { id: string; value: QueuedRow }[] = []
      for (const r of batch.items) {
        if (dup?.has(r.id)) continue
        try {
          rows.push({ id: r.id, value: { ...encodeRow(r), queuedAt: now } })
        } catch (err) {
          // Not expected (a record is JSON); the record itself is stored, so answer for it and say so.
          this.settings.metrics.failed(1)
          this.settings.logger.error({ err, id: r.id }, 'clickhouse: a record could not be made into a row; it is not queued')
        }
      }
      n = queue.putInTransaction(rows)
    })
    try {
      await batch.ctx.unit!.commit()
    } catch (err) {
      if (batch.ctx.unit!.refusedWith(err)) throw err // another branch's queue is full: it counts the refusal
      this.settings.metrics.failed(batch.items.length)
      throw new RetryableError(`clickhouse queue write failed: ${(err as Error).message}`, err)
    }
    queue.added(n)
    this.settings.metrics.accepted(n)
    if (this.refusing) {
      this.refusing = false
      this.settings.logger.info({ queued: queue.depth }, 'clickhouse queue accepting records again')
    }
    if (queue.depth >= this.config.batch_size) this.nap.wake()
  }

  /** The sender: oldest rows first, one INSERT at a time, until shutdown. */
  private async run(): Promise<void> {
    const queue = this.queue!
    while (!this.stopped) {
      try {
        if (!this.tableReady) await this.createTable()
        const oldest = queue.oldest(this.config.batch_size)
        if (oldest.length === 0) {
          this.pendingSince = undefined
          await this.nap.sleep(this.config.flush_interval_ms)
          continue
        }
        if (oldest.length < this.config.batch_size) {
          // A partial batch waits up to flush_interval_ms (wall time: the service's clock may be a test's) for more.
          this.pendingSince ??= Date.now()
          const waited = Date.now() - this.pendingSince
          if (waited < this.config.flush_interval_ms) {
            await this.nap.sleep(this.config.flush_interval_ms - waited)
            continue
          }
        }
        let send = await this.latest(oldest.map(entryOf))
        if (this.uncertain) send = await this.absent(send)
        if (send.length > 0) await this.deliver(send)
        this.uncertain = false
        this.pendingSince = undefined
        this.backoff.reset()
      } catch (err) {
        if (this.stopped) break
        this.errors.inc({ exporter: this.settings.id })
        if (isMissingTable(err)) this.tableReady = false
        const delay = this.backoff.next()
        if (this.backoff.failures === 1 || this.backoff.failures % 10 === 0)
          this.settings.logger.warn({ err: (err as Error).message, queued: queue.depth, retryInMs: delay }, 'clickhouse insert failed; retrying')
        await this.nap.sleep(delay)
      }
    }
  }

  /**
   * A record's rows are inserted in version order and never two in one insert (a table of an
   * earlier build keeps the last one inserted: table.ts): of several versions of a record in
   * the batch, the highest alone is sent and the others leave the queue, replaced.
   */
  private async latest(entries: Entry[]): Promise<Entry[]> {
    const top = new Map<string, Entry>()
    for (const e of entries) if ((top.get(e.id)?.version ?? -1) < e.version) top.set(e.id, e)
    if (top.size === entries.length) return entries
    const replaced = entries.filter((e) => top.get(e.id) !== e)
    await this.queue!.settle(replaced.map((e) => e.key))
    return entries.filter((e) => top.get(e.id) === e)
  }

  /** The rows ClickHouse does not hold yet; those it holds (an earlier insert stored them) leave the queue. */
  private async absent(entries: Entry[]): Promise<Entry[]> {
    const present = await this.present(entries)
    if (present.size === 0) return entries
    const held = entries.filter((e) => present.has(rowKey(e.id, e.version)))
    await this.queue!.settle(held.map((e) => e.key))
    this.settings.logger.info({ records: held.length }, 'clickhouse already held records of an interrupted insert; not inserting them again')
    return entries.filter((e) => !present.has(rowKey(e.id, e.version)))
  }

  /**
   * Inserts the rows and settles them. When ClickHouse refuses the data itself (table.ts:
   * refusal), the refused rows are found by inserting the rows in halves, down to one: each
   * half ClickHouse takes is settled, each row it refuses alone goes to the dead letters (with
   * the error, logged and counted), and the rest go on. Any other failure is thrown: the whole
   * remainder is retried after a backoff, after a look-up of what ClickHouse holds.
   */
  private async deliver(entries: Entry[]): Promise<void> {
    // Unknown from here until the queue has recorded the acknowledgement.
    this.uncertain = true
    try {
      await insertLines(this.client!, this.target, entries.map((e) => withVersion(e.value.line, e.version)), this.abort.signal)
    } catch (err) {
      const refused = refusal(err)
      if (refused === undefined || this.stopped) throw err
      this.errors.inc({ exporter: this.settings.id })
      const message = (err as Error).message.trim()
      if (entries.length === 1) {
        const [e] = entries
        this.settings.logger.error(
          { recordId: e.id, version: e.version, code: refused.code, error: `${refused.name}: ${message}` },
          'ClickHouse refused a record for good; it is kept in the dead letters',
        )
        await this.queue!.settle([], [{ id: e.key, status: refused.code, error: `${refused.name}: ${message}`, at: this.host!.now() }])
        return
      }
      // A large insert may be stored in several blocks, some before the refused row: look first.
      const rest = await this.absent(entries)
      const half = Math.ceil(rest.length / 2)
      if (rest.length > 0) await this.deliver(rest.slice(0, half))
      if (rest.length > half) await this.deliver(rest.slice(half))
      return
    }
    await this.queue!.settle(entries.map((e) => e.key))
    this.inserted.inc({ exporter: this.settings.id }, entries.length)
  }

  private async createTable(): Promise<void> {
    const state = await ensureTable(this.client!, this.target, this.abort.signal)
    if (state === 'migrated') this.settings.logger.info({ table: tableOf(this.target) }, 'clickhouse: added the version column to a table of an earlier build')
    this.tableReady = true
  }

  /** Which of these rows (record and version) the table holds already, looked up within their event dates' partitions. */
  private async present(entries: Entry[]): Promise<Set<string>> {
    const found = new Set<string>()
    // In slices, so that each query stays far below ClickHouse's max_query_size (256 KiB).
    for (let i = 0; i < entries.length; i += LOOKUP) {
      const slice = entries.slice(i, i + LOOKUP)
      const dates = [...new Set(slice.map((e) => e.value.date))].map(quote).join(', ')
      const ids = [...new Set(slice.map((e) => e.id))].map(quote).join(', ')
      const res = await this.client!.query({
        query: `SELECT DISTINCT id, toString(version) AS version FROM ${tableOf(this.target)} WHERE event_date IN (${dates}) AND id IN (${ids})`,
        format: 'JSONEachRow',
        abort_signal: this.abort.signal,
      })
      for (const r of (await res.json()) as { id: string; version: string }[]) found.add(rowKey(r.id, Number(r.version)))
    }
    return found
  }
}

const entryOf = ({ id: key, value }: { id: string; value: QueuedRow }): Entry => ({ key, id: value.id ?? key, version: value.version ?? 0, value })
const rowKey = (id: string, version: number) => `${id}\u0000${version}`

/** The queue gauges, read from the running exporters; every worker sees the one shared queue: max, not a sum. */
const gaugesOf = (registry: Registry) =>
  instanceGauges<ReturnType<ClickHouseExporter['stats']>>(
    registry,
    [
      { name: 'meterd_clickhouse_queue_records', help: 'Records waiting in the clickhouse queue', pick: (s) => s.depth },
      { name: 'meterd_clickhouse_queue_oldest_age_seconds', help: 'Age of the oldest record in the clickhouse queue', pick: (s) => s.oldestAgeSeconds },
      { name: 'meterd_clickhouse_dead_letter_records', help: 'Records ClickHouse refused for good, kept in the dead letters', pick: (s) => s.dead },
    ],
    'max',
  )

export const clickhouseFactory: ExporterFactory<typeof clickhouseDescriptor.schema> = {
  ...clickhouseDescriptor,
  create: (settings, config) => new ClickHouseExporter(settings, config),
}
