import { Counter, type Registry } from 'prom-client'
import { instanceGauges } from '../../core/telemetry.js'
import { Nap } from '../../store/record-queue.js'
import type { ConsumingComponent, CreateSettings, ExporterFactory, Host } from '../../host/component.js'
import { unitOf, type Batch } from '../../core/consumer.js'
import { RetryableError, ThrottledError } from '../../core/errors.js'
import type { UsageRecord } from '../../model/usage-record.js'
import { UpstreamQueue, type Queued } from './queue.js'
import { UpstreamSender, type SendOutcome } from './sender.js'
import { upstreamDescriptor, type Config } from './descriptor.js'

/**
 * Sidecar → gateway forwarding (DESIGN §1, §9): usage records go into a persistent LMDB queue in
 * the request's own transaction — a 201 from the sidecar means the record is queued — and a
 * sender posts them to the upstream's REST metering endpoints in batches, retrying with backoff,
 * jitter and Retry-After until the upstream acknowledges. A record without a transactionId is sent
 * with the sidecar's record id as its transactionId, so the upstream's dedup turns at-least-once
 * delivery into stored once. Records the upstream refuses for good (400, 413, 415, 422) move to a
 * dead-letter table, counted and logged; nothing is dropped silently. A batch the upstream finds
 * too large (413 batch_too_large) refuses none of its records: later requests carry fewer.
 */
export class UpstreamExporter implements ConsumingComponent {
  readonly consumers
  private host?: Host
  private queue?: UpstreamQueue
  private readonly sender: UpstreamSender
  private stopped = true
  private loop?: Promise<void>
  /** The sender's wait between attempts: records and shutdown cut it short. */
  private readonly nap = new Nap(() => this.stopped || this.failures === 0)
  private readonly abort = new AbortController()
  private failures = 0
  /**
   * Records per request: batch_size, lowered for good (until a restart) when the upstream answers
   * 413 batch_too_large. Not grown again: the upstream's limit is its config, which rarely changes,
   * and probing it would cost a refused request each time.
   */
  private batchSize: number
  /** Whether the queue is refusing requests (full): its start and end are logged once each. */
  private refusing = false
  private readonly sent: Counter
  private readonly errors: Counter

  constructor(private readonly settings: CreateSettings, private readonly config: Config) {
    this.consumers = { usage: { consume: (b: Batch<UsageRecord>) => this.consume(b) } }
    this.batchSize = config.batch_size
    this.sender = new UpstreamSender({ endpoint: config.endpoint, apiKey: config.api_key, timeoutMs: config.timeout_ms, maxRetryAfterMs: config.max_backoff_ms })
    const labels = ['exporter']
    const reg = settings.registry
    const counter = (name: string, help: string, names = labels) => (reg.getSingleMetric(name) as Counter) ?? new Counter({ name, help, labelNames: names, registers: [reg] })
    this.sent = counter('meterd_upstream_sent_records_total', 'Records the upstream acknowledged')
    this.errors = counter('meterd_upstream_send_errors_total', 'Failed upstream requests, by reason (retry, refused, batch_too_large)', ['exporter', 'reason'])
  }

  async start(host: Host): Promise<void> {
    this.host = host
    const queue = (this.queue = new UpstreamQueue(host.store, this.settings.id.replace('/', '_')))
    gaugesOf(this.settings.registry).add(this)
    this.stopped = false
    this.loop = this.run()
    if (queue.depth) this.settings.logger.info({ queued: queue.depth }, 'upstream queue holds records from before the restart; sending them')
  }

  /** What the queue gauges show for this exporter. */
  stats(): { id: string; depth: number; oldestAgeSeconds: number; dead: number; batchSize: number } {
    const q = this.queue!
    return { id: this.settings.id, depth: q.depth, oldestAgeSeconds: q.oldestAge(this.host!.now()) / 1000, dead: q.deadLetters, batchSize: this.batchSize }
  }

  async shutdown(): Promise<void> {
    if (this.stopped) return
    this.stopped = true
    gaugesOf(this.settings.registry).delete(this)
    this.abort.abort()
    this.nap.wake()
    await this.loop
    await this.sender.close()
  }

  private async consume(batch: Batch<UsageRecord>): Promise<void> {
    const queue = this.queue!
    // An empty queue takes any request: one larger than the bound would otherwise be refused for ever.
    if (queue.depth > 0 && queue.depth + batch.items.length > this.config.max_queue_records) {
      this.settings.metrics.refused(batch.items.length)
      if (!this.refusing) this.settings.logger.warn({ queued: queue.depth, max: this.config.max_queue_records }, 'upstream queue full: requests are answered 503 until it drains')
      this.refusing = true
      const err = new ThrottledError(`the upstream queue is full (${queue.depth} records)`, 1000)
      // Refused as a whole (the other branches store nothing either), so the client's retry
      // reaches this queue too instead of being answered from dedup.
      if (!unitOf(batch, this.host!.store).refuse(err))
        this.settings.logger.warn({ records: batch.items.length }, 'upstream queue full after another branch stored the records: they are not queued for the upstream')
      throw err
    }
    const now = this.host!.now()
    const items = batch.items.map((r) => ({ id: r.id, value: queued(r, now) }))
    const unit = unitOf(batch, this.host!.store)
    let fresh = 0
    unit.add(() => (fresh = queue.putInTransaction(items)))
    try {
      await unit.commit()
    } catch (err) {
      if (unit.refusedWith(err)) throw err // another branch's queue is full: it counts the refusal
      this.settings.metrics.failed(items.length)
      throw new RetryableError(`upstream queue write failed: ${(err as Error).message}`, err)
    }
    queue.added(fresh)
    this.settings.metrics.accepted(items.length)
    if (this.refusing) {
      this.refusing = false
      this.settings.logger.info({ queued: queue.depth }, 'upstream queue accepting records again')
    }
    this.nap.wake()
  }

  /** The sender: oldest records first, one request at a time, until shutdown. */
  private async run(): Promise<void> {
    const queue = this.queue!
    while (!this.stopped) {
      let retry: SendOutcome | undefined
      try {
        retry = await this.step(queue)
      } catch (err) {
        // The queue could not be updated (a full disk): the records stay queued, and are sent
        // again later (the upstream's dedup stores them once). The loop must outlive it.
        if (this.stopped) break
        retry = { kind: 'retry', error: `the local queue could not be updated: ${(err as Error).message}` }
      }
      if (this.stopped || retry?.kind !== 'retry') continue
      this.errors.inc({ exporter: this.settings.id, reason: 'retry' })
      const delay = this.backoff(retry.afterMs)
      if (this.failures === 1 || this.failures % 10 === 0)
        this.settings.logger.warn({ status: retry.status, error: retry.error, queued: queue.depth, retryInMs: delay }, 'upstream send failed; retrying')
      await this.nap.sleep(delay)
    }
  }

  /** One request (or one pass of single records); the outcome to back off on, if any. */
  private async step(queue: UpstreamQueue): Promise<SendOutcome | undefined> {
    const oldest = queue.oldest(this.batchSize)
    if (oldest.length === 0) {
      await this.nap.sleep(1000)
      return undefined
    }
    // One kind per request: the oldest record's, and every record of that kind among the oldest.
    const kind = oldest[0].value.kind
    const group = oldest.filter((e) => e.value.kind === kind)
    const out = await this.sender.send(kind, group.map((e) => e.value.body), this.abort.signal)
    if (this.stopped) return undefined
    if (out.kind === 'acked') {
      await queue.settle(group.map((e) => e.id))
      this.sent.inc({ exporter: this.settings.id }, group.length)
      // The warnings said it was failing: say when it stopped, so an operator need not guess.
      if (this.failures > 0) this.settings.logger.info({ failedSends: this.failures, queued: queue.depth }, 'upstream reachable again; sending the queue')
      this.failures = 0
      return undefined
    }
    if (out.kind === 'batch_too_large') {
      // Nothing is settled: the same records go again at once, in smaller requests.
      this.shrink(group.length, out)
      return undefined
    }
    if (out.kind === 'refused') {
      this.errors.inc({ exporter: this.settings.id, reason: 'refused' })
      if (out.index !== undefined && group[out.index]) {
        const bad = group[out.index]
        this.deadLetter(bad.id, out)
        await queue.settle([], [{ id: bad.id, status: out.status, error: out.error, at: this.host!.now() }])
        return undefined
      }
      // A batch refused without naming the record: send its records one by one to find it.
      return this.sendEach(group)
    }
    return out
  }

  /**
   * The upstream refused a batch of `sent` records as too large: requests carry its stated limit
   * from now on, or half as many when it states none (each refusal lowers the size, so this ends).
   */
  private shrink(sent: number, out: { status: number; error: string; limit?: number }): void {
    this.errors.inc({ exporter: this.settings.id, reason: 'batch_too_large' })
    const next = Math.min(this.batchSize, out.limit !== undefined && out.limit < sent ? out.limit : Math.max(1, Math.floor(sent / 2)))
    if (next === this.batchSize) return
    this.settings.logger.warn(
      { batchSize: this.batchSize, newBatchSize: next, upstreamMaxBatchItems: out.limit, error: out.error },
      `the upstream takes fewer records per request than batch_size: sending ${next} per request from now on; raise the upstream's max_batch_items or set batch_size to ${next}`,
    )
    this.batchSize = next
  }

  private deadLetter(id: string, out: { status: number; error: string }): void {
    this.settings.logger.error({ recordId: id, status: out.status, error: out.error }, 'the upstream refused a record for good; it is kept in the dead letters')
  }

  /**
   * Sends the records one by one, settling, counting and logging each as the batch would; returns
   * the outcome that stopped it when the upstream became unavailable, for the loop to back off on.
   */
  private async sendEach(group: { id: string; value: Queued }[]): Promise<SendOutcome | undefined> {
    for (const e of group) {
      if (this.stopped) return undefined
      const out = await this.sender.send(e.value.kind, [e.value.body], this.abort.signal)
      if (this.stopped) return undefined
      if (out.kind === 'acked') {
        await this.queue!.settle([e.id])
        this.sent.inc({ exporter: this.settings.id })
      } else if (out.kind === 'refused') {
        this.errors.inc({ exporter: this.settings.id, reason: 'refused' })
        this.deadLetter(e.id, out)
        await this.queue!.settle([], [{ id: e.id, status: out.status, error: out.error, at: this.host!.now() }])
      } else return out
    }
    return undefined
  }

  /** The next delay: exponential with jitter, or the upstream's Retry-After when that is longer. */
  private backoff(retryAfterMs?: number): number {
    const n = this.failures++
    const base = Math.min(this.config.max_backoff_ms, this.config.initial_backoff_ms * 2 ** Math.min(n, 30))
    // Retry-After is the least wait, never a shorter one: `Retry-After: 0` must not become a hot loop.
    return Math.max(retryAfterMs ?? 0, Math.round(base * (1 + this.config.jitter * Math.random())))
  }
}

/** The queue gauges, read from the running exporters when /metrics is collected. */
const gaugesOf = (registry: Registry) =>
  instanceGauges<ReturnType<UpstreamExporter['stats']>>(registry, [
    { name: 'meterd_upstream_queue_records', help: 'Records waiting in the upstream queue', pick: (s) => s.depth },
    { name: 'meterd_upstream_queue_oldest_age_seconds', help: 'Age of the oldest record in the upstream queue', pick: (s) => s.oldestAgeSeconds },
    { name: 'meterd_upstream_dead_letter_records', help: 'Records the upstream refused for good', pick: (s) => s.dead },
    { name: 'meterd_upstream_batch_size', help: 'Records per upstream request: batch_size, or less after the upstream answered 413 batch_too_large', pick: (s) => s.batchSize },
  ])

/** The body as the upstream will store it: the client's, with a transactionId to dedup on. */
function queued(r: UsageRecord, now: number): Queued {
  const body = typeof r.body.transactionId === 'string' && r.body.transactionId !== '' ? r.body : { ...r.body, transactionId: `meterd-${r.id}` }
  return { kind: r.kind, body, queuedAt: now }
}

export const upstreamFactory: ExporterFactory<typeof upstreamDescriptor.schema> = {
  ...upstreamDescriptor,
  create: (settings, config) => new UpstreamExporter(settings, config),
}
