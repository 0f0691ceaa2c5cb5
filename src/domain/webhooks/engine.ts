import type { Agent } from 'undici'
import type { Logger } from 'pino'
import { Counter, Gauge, Histogram, type Registry } from 'prom-client'
import { newId } from '../../core/ids.js'
import type { DeliveryClaims } from '../../ports/deliveries.js'
import type { Store } from '../../store/store.js'
import { DestinationGuard, DestinationRefused } from './destination.js'
import type { ConfigurationSource, Delivery, ExportConfiguration, WebhookEvent } from './model.js'
import { DeliveryQueue } from './queue.js'
import { signatureHeader, webhookHeaderNames } from './signature.js'

export interface EngineOptions {
  /** Delay before each attempt: [0] is the first (at once), the rest are retries; after the last, dead-letter. */
  retryScheduleMs: number[]
  /** Each retry delay is stretched by up to this fraction, at random (never shortened). */
  jitterRatio: number
  timeoutMs: number
  maxConcurrencyPerEndpoint: number
  pollIntervalMs: number
  /** Upper bound on a receiver's Retry-After. */
  maxRetryAfterMs: number
  vendorWord: string
  allowPrivateDestinations: string[]
  /** Gateway cluster: a delivery is sent only if it holds the cluster's claim on its (endpoint, event). */
  claims?: DeliveryClaims
}

/** Scan at most this many due entries per pass, so a large backlog never stalls a tick. */
const SCAN_LIMIT = 2000
/** …and stop early after this many entries that had to wait for a busy endpoint. */
const SKIP_LIMIT = 256

type Outcome =
  | { kind: 'succeeded'; statusCode: number }
  | { kind: 'retry'; statusCode?: number; error: string; retryAfterMs?: number }
  | { kind: 'dead'; statusCode?: number; error: string }
  | { kind: 'gone'; statusCode: number }

/**
 * The delivery engine: queue (LMDB) → per-endpoint concurrency → signed attempt with a
 * timeout → retry on the schedule with jitter (or Retry-After) → dead-letter. All
 * scheduling reads the host clock, so tests move time instead of sleeping; `tick()` runs
 * one pass, and a poll timer plus a wake-up after every enqueue and attempt drive it in
 * production.
 */
interface EnqueuePlan {
  deliveries: Delivery[]
  buffered: { configId: string; event: WebhookEvent; at: number }[]
  /** Configurations with batching that got events: checked for a full batch after the commit. */
  batching: Map<string, ExportConfiguration>
}

export class DeliveryEngine {
  readonly queue: DeliveryQueue
  readonly guard: DestinationGuard
  /** undici loads on the first delivery: a daemon that never delivers webhooks does not pay for it (idle RSS). */
  private http?: Promise<{ agent: Agent; request: typeof import('undici').request }>
  private readonly headers: ReturnType<typeof webhookHeaderNames>
  private readonly inflight = new Set<string>()
  private readonly perEndpoint = new Map<string, number>()
  private readonly running = new Set<Promise<void>>()
  private timer?: NodeJS.Timeout
  private kickScheduled = false
  private stopped = false
  /** Set in a worker that is not the leader: deliveries are the leader's, kick() asks it for a pass. */
  private remoteKick?: () => void
  /** Aborts attempts in flight at shutdown; their due entries stay, so they run again after restart. */
  private abort = new AbortController()
  /** Destinations that are not export configurations (the Slack targets of alert rules), by id prefix. */
  private readonly sources = new Map<string, ConfigurationSource>()
  private readonly m: {
    attempted: Counter
    succeeded: Counter
    failed: Counter
    dead: Counter
    latency: Histogram
  }

  constructor(
    store: Store,
    private readonly configs: ConfigurationSource,
    private readonly opts: EngineOptions,
    readonly now: () => number,
    private readonly logger: Logger,
    registry: Registry,
  ) {
    this.queue = new DeliveryQueue(store)
    this.guard = new DestinationGuard(opts.allowPrivateDestinations)
    this.headers = webhookHeaderNames(opts.vendorWord)
    const counter = (name: string, help: string) =>
      (registry.getSingleMetric(name) as Counter | undefined) ?? new Counter({ name, help, registers: [registry] })
    this.m = {
      attempted: counter('meterd_webhook_deliveries_attempted_total', 'Webhook delivery attempts'),
      succeeded: counter('meterd_webhook_deliveries_succeeded_total', 'Webhook deliveries answered 2xx'),
      failed: counter('meterd_webhook_deliveries_failed_total', 'Webhook delivery attempts that failed'),
      dead: counter('meterd_webhook_deliveries_dead_lettered_total', 'Webhook deliveries given up into the dead-letter list'),
      latency:
        (registry.getSingleMetric('meterd_webhook_delivery_duration_seconds') as Histogram | undefined) ??
        new Histogram({
          name: 'meterd_webhook_delivery_duration_seconds',
          help: 'Duration of one webhook delivery attempt',
          buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15],
          registers: [registry],
        }),
    }
    if (!registry.getSingleMetric('meterd_webhook_queue_depth')) {
      const queue = this.queue
      new Gauge({
        name: 'meterd_webhook_queue_depth',
        help: 'Webhook deliveries waiting for an attempt',
        registers: [registry],
        aggregator: 'max', // several workers read one queue in the data directory
        collect() {
          this.set(queue.depth)
        },
      })
    }
  }

  /** Lets deliveries whose configId starts with `prefix` find their destination in `source`. */
  addSource(prefix: string, source: ConfigurationSource): void {
    this.sources.set(prefix, source)
  }

  private sourceOf(configId: string): ConfigurationSource {
    for (const [prefix, source] of this.sources) if (configId.startsWith(prefix)) return source
    return this.configs
  }

  /**
   * Makes this engine a follower (a worker that is not the leader): it queues deliveries in the
   * shared store and asks the leader, through `kick`, to deliver them; it never delivers itself,
   * so every delivery is sent by one process, once.
   */
  follow(kick: () => void): void {
    this.remoteKick = kick
  }

  start(): void {
    if (this.remoteKick) return
    this.stopped = false
    this.abort = new AbortController()
    this.timer = setInterval(() => this.kick(), this.opts.pollIntervalMs)
    this.timer.unref()
    this.kick()
  }

  /** Stops scheduling and waits for attempts in flight (their outcome is recorded). */
  async stop(): Promise<void> {
    this.stopped = true
    if (this.timer) clearInterval(this.timer)
    this.abort.abort()
    await Promise.allSettled([...this.running])
    if (this.http) await (await this.http).agent.close().catch(() => undefined)
  }

  /** A new delivery of `event` to `config`, due at once. */
  newDelivery(config: ExportConfiguration, event: WebhookEvent): Delivery {
    const now = this.now()
    return {
      id: 'dlv_' + newId(now),
      eventId: event.id,
      eventType: event.type,
      configId: config.id,
      team: config.team,
      body: JSON.stringify(event),
      status: 'pending',
      attemptCount: 0,
      attempts: [],
      nextAttemptAt: now + (this.opts.retryScheduleMs[0] ?? 0),
      createdAt: now,
      updatedAt: now,
    }
  }

  /**
   * Queues events durably: resolves once they are on disk. Events for a configuration with
   * batching wait in the batch buffer (unless `direct`); the rest become deliveries.
   */
  async enqueue(items: { config: ExportConfiguration; event: WebhookEvent }[], opts: { direct?: boolean } = {}): Promise<Delivery[]> {
    const plan = this.plan(items, opts)
    await this.queue.enqueue(plan.deliveries, plan.buffered)
    await this.afterCommit(plan)
    return plan.deliveries
  }

  /**
   * enqueue() inside the caller's write transaction (a WriteUnit step, so the deliveries commit
   * with the records they describe). Call the returned function once that transaction is durable.
   */
  enqueueInTransaction(items: { config: ExportConfiguration; event: WebhookEvent }[]): () => Promise<void> {
    const plan = this.plan(items, {})
    this.queue.putInTransaction(plan.deliveries, plan.buffered)
    return () => this.afterCommit(plan)
  }

  private plan(items: { config: ExportConfiguration; event: WebhookEvent }[], opts: { direct?: boolean }): EnqueuePlan {
    const plan: EnqueuePlan = { deliveries: [], buffered: [], batching: new Map() }
    for (const { config, event } of items) {
      if (config.batching && !opts.direct) {
        plan.buffered.push({ configId: config.id, event, at: this.now() })
        plan.batching.set(config.id, config)
      } else plan.deliveries.push(this.newDelivery(config, event))
    }
    return plan
  }

  /** Once a plan is on disk: flush the batches it filled, and start delivering. */
  private async afterCommit(plan: EnqueuePlan): Promise<void> {
    if (this.remoteKick) return this.kick()
    if (plan.batching.size) {
      const waiting = this.queue.batches()
      for (const c of plan.batching.values()) {
        const b = waiting.get(c.id)
        if (b && b.count >= c.batching!.maxEvents) await this.flushBatch(c)
      }
    }
    this.kick()
  }

  private flushBatch(config: ExportConfiguration): Promise<Delivery | undefined> {
    return this.queue.flushBatch(config.id, config.batching!.maxEvents, (events) =>
      this.newDelivery(config, {
        id: 'evt_' + newId(this.now()),
        type: 'usage.batch',
        created: new Date(this.now()).toISOString(),
        teamId: config.team,
        data: { count: events.length, events },
      }),
    )
  }

  /** Schedules a pass soon (coalesced). */
  kick(): void {
    if (this.kickScheduled || this.stopped) return
    this.kickScheduled = true
    setImmediate(() => {
      this.kickScheduled = false
      if (this.remoteKick) return this.remoteKick()
      if (!this.stopped) this.tick().catch((err) => this.logger.error({ err }, 'webhook delivery pass failed'))
    })
  }

  /** One pass: flush batches that waited long enough, then start every due attempt the limits allow; resolves when those attempts are recorded. */
  async tick(): Promise<void> {
    const now = this.now()
    const waiting = this.queue.batches()
    for (const [configId, b] of waiting) {
      const config = this.sourceOf(configId).get(configId)
      if (!config?.batching) continue
      if (b.count >= config.batching.maxEvents || now - b.oldest >= config.batching.maxWaitMs) await this.flushBatch(config)
    }
    const launched: Promise<void>[] = []
    const seen = new Map<string, { config?: ExportConfiguration; endpoint: string }>()
    let skipped = 0
    for (const due of this.queue.dueUntil(now, SCAN_LIMIT)) {
      if (this.stopped) break
      let c = seen.get(due.configId)
      if (!c) {
        const config = this.sourceOf(due.configId).get(due.configId)
        seen.set(due.configId, (c = { config, endpoint: config ? endpointOf(config.url) : '' }))
      }
      const { config, endpoint } = c
      const busy = this.perEndpoint.get(endpoint) ?? 0
      if (this.inflight.has(due.id) || busy >= this.opts.maxConcurrencyPerEndpoint) {
        // A long backlog for busy endpoints: stop once every endpoint met so far is full (each completion starts a new pass).
        if (++skipped >= SKIP_LIMIT && [...seen.values()].every((x) => (this.perEndpoint.get(x.endpoint) ?? 0) >= this.opts.maxConcurrencyPerEndpoint)) break
        continue
      }
      this.inflight.add(due.id)
      this.perEndpoint.set(endpoint, busy + 1)
      const p = this.attempt(due.id, due.at, config).finally(() => {
        this.inflight.delete(due.id)
        this.perEndpoint.set(endpoint, (this.perEndpoint.get(endpoint) ?? 1) - 1)
        this.running.delete(p)
        this.kick()
      })
      this.running.add(p)
      launched.push(p)
    }
    await Promise.all(launched)
  }

  /** Runs passes until nothing is due at the current clock and nothing is in flight (for tests and benches). */
  async settle(): Promise<void> {
    for (let i = 0; i < 10_000; i++) {
      await this.tick()
      if (this.running.size) {
        await Promise.allSettled([...this.running])
        continue
      }
      const now = this.now()
      const anyDue = !this.queue.dueUntil(now, 1).next().done
      const batchDue = [...this.queue.batches()].some(([id, b]) => {
        const c = this.sourceOf(id).get(id)
        return c?.batching && (b.count >= c.batching.maxEvents || now - b.oldest >= c.batching.maxWaitMs)
      })
      if (!anyDue && !batchDue) return
    }
  }

  private async attempt(id: string, dueAt: number, config: ExportConfiguration | undefined): Promise<void> {
    const d = this.queue.get(id)
    if (!d) {
      await this.queue.due.remove([dueAt, id])
      return
    }
    if (this.opts.claims && d.attemptCount === 0 && !(await this.claimed(d))) {
      if (d.status !== 'failed') return // shared state unreachable: the due entry stays, tried at a later pass
      await this.queue.settle(d, dueAt)
      return
    }
    const startedAt = this.now()
    const t0 = performance.now()
    const outcome = await this.send(d, config)
    if (this.stopped) return // cut short by shutdown: not an attempt; it runs again after restart
    const durationMs = Math.round((performance.now() - t0) * 1000) / 1000
    this.m.latency.observe(durationMs / 1000)

    d.attemptCount++
    d.updatedAt = this.now()
    const statusCode = 'statusCode' in outcome ? outcome.statusCode : undefined
    const error = 'error' in outcome ? outcome.error : outcome.kind === 'gone' ? 'the endpoint answered 410 Gone; the configuration was disabled' : undefined
    d.attempts.push({ attempt: d.attemptCount, at: new Date(startedAt).toISOString(), durationMs, statusCode, error, succeeded: outcome.kind === 'succeeded' })
    d.lastError = error
    if (outcome.kind === 'succeeded') {
      this.m.succeeded.inc()
      d.status = 'succeeded'
      d.nextAttemptAt = undefined
    } else {
      this.m.failed.inc()
      const schedule = this.opts.retryScheduleMs
      if (outcome.kind === 'retry' && d.attemptCount < schedule.length) {
        const base = schedule[d.attemptCount]
        const jittered = base + Math.floor(base * this.opts.jitterRatio * Math.random())
        const delay = outcome.retryAfterMs !== undefined ? Math.max(outcome.retryAfterMs, 0) : jittered
        d.nextAttemptAt = this.now() + delay
      } else {
        this.m.dead.inc()
        d.status = outcome.kind === 'gone' ? 'failed' : 'dead_lettered'
        d.nextAttemptAt = undefined
        this.logger.warn({ deliveryId: d.id, eventId: d.eventId, configId: d.configId, attempts: d.attemptCount, error }, 'webhook delivery given up')
      }
      if (outcome.kind === 'gone') {
        await this.sourceOf(d.configId).disable(d.configId, 'the endpoint answered 410 Gone')
        this.logger.warn({ configId: d.configId }, 'export configuration disabled: its endpoint answered 410 Gone')
      }
    }
    await this.queue.settle(d, dueAt)
  }

  /**
   * Whether this delivery holds the cluster's claim on its event and endpoint. Another replica's
   * delivery holding it settles this one as failed, unsent; no answer from the shared state
   * leaves it pending.
   */
  private async claimed(d: Delivery): Promise<boolean> {
    let mine: boolean
    try {
      mine = await this.opts.claims!.claim(d.configId, d.eventId, d.id)
    } catch {
      return false
    }
    if (!mine) {
      d.status = 'failed'
      d.nextAttemptAt = undefined
      d.updatedAt = this.now()
      d.lastError = 'another replica of the cluster delivers this event to this endpoint'
      this.logger.info({ deliveryId: d.id, eventId: d.eventId, configId: d.configId }, 'webhook delivery left to another replica')
    }
    return mine
  }

  private async send(d: Delivery, config: ExportConfiguration | undefined): Promise<Outcome> {
    if (!config) return { kind: 'dead', error: 'the export configuration was deleted' }
    if (!config.enabled) return { kind: 'dead', error: 'the export configuration is disabled' }
    this.m.attempted.inc()
    const h = this.headers
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'user-agent': 'meterd-webhooks/1',
      [h.eventId]: d.eventId,
      [h.deliveryId]: d.id,
      [h.eventType]: d.eventType,
    }
    try {
      const url = new URL(config.url)
      this.guard.checkLiteral(url)
      const now = this.now()
      const secrets = this.sourceOf(config.id).signingSecrets(config.id, now)
      if (secrets) {
        // Signed afresh on every attempt: a new timestamp, so retries stay inside the receiver's tolerance.
        const ts = String(Math.floor(now / 1000))
        headers[h.timestamp] = ts
        headers[h.signature] = signatureHeader(secrets, ts, d.body)
      }
      const timeout = config.timeoutMs ?? this.opts.timeoutMs
      const { agent, request } = await this.client()
      const res = await request(url, {
        method: 'POST',
        headers,
        body: d.body,
        dispatcher: agent,
        headersTimeout: timeout,
        bodyTimeout: timeout,
        signal: AbortSignal.any([AbortSignal.timeout(timeout), this.abort.signal]),
      })
      await res.body.dump({ limit: 64 * 1024 }).catch(() => undefined)
      const code = res.statusCode
      if (code >= 200 && code < 300) return { kind: 'succeeded', statusCode: code }
      if (code === 410) return { kind: 'gone', statusCode: code }
      const retryAfterMs = code === 429 || code === 503 ? this.retryAfter(res.headers['retry-after']) : undefined
      return { kind: 'retry', statusCode: code, error: code >= 300 && code < 400 ? `redirect ${code} (not followed)` : `HTTP ${code}`, retryAfterMs }
    } catch (err) {
      if (err instanceof DestinationRefused || (err as { cause?: unknown }).cause instanceof DestinationRefused) {
        return { kind: 'dead', error: `destination refused: ${(err as Error).message}` }
      }
      const e = err as Error & { code?: string }
      return { kind: 'retry', error: e.name === 'TimeoutError' || e.code === 'UND_ERR_HEADERS_TIMEOUT' ? 'timed out' : `${e.code ?? e.name}: ${e.message}` }
    }
  }

  /** Retry-After in seconds or as an HTTP date, bounded. */
  private client(): Promise<{ agent: Agent; request: typeof import('undici').request }> {
    return (this.http ??= import('undici').then(({ Agent, request }) => ({
      agent: new Agent({
        keepAliveTimeout: 30_000,
        connections: this.opts.maxConcurrencyPerEndpoint,
        connect: { lookup: this.guard.lookup, timeout: Math.min(this.opts.timeoutMs, 10_000) },
      }),
      request,
    })))
  }

  private retryAfter(v: string | string[] | undefined): number | undefined {
    const s = Array.isArray(v) ? v[0] : v
    if (!s) return undefined
    let ms: number
    if (/^\d+$/.test(s.trim())) ms = Number(s.trim()) * 1000
    else {
      const at = Date.parse(s)
      if (Number.isNaN(at)) return undefined
      ms = at - this.now()
    }
    return Math.min(Math.max(ms, 0), this.opts.maxRetryAfterMs)
  }
}

function endpointOf(url: string): string {
  try {
    return new URL(url).origin
  } catch {
    return url
  }
}
