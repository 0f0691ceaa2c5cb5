import { readFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import type { Logger } from 'pino'
import { Counter, Gauge, type Registry } from 'prom-client'
import { storeGauges } from '../store/metrics.js'
import { leftBehindQueues } from '../store/record-queue.js'
import { Admission } from '../transport/admission/index.js'
import { bodyBudget } from '../transport/http/body.js'
import { HttpServer } from '../transport/http/server.js'
import { Store } from '../store/store.js'
import type { SharedState } from '../ports/shared.js'
import type { UsageRecords } from '../ports/usage.js'
import type { Component, Host, Kind } from './component.js'
import type { MeterdConfig, ServerConfig } from '../core/config/schema.js'
import { ApiError, DOC_PATH } from '../core/errors.js'
import { PACKAGE_ROOT } from '../core/paths.js'
import { dataDirFailure, listenFailure } from '../core/startup-error.js'
import { build, type Factories, type Graph, type Plan } from './graph.js'
import { LOCAL, type ClusterBus } from '../core/cluster/bus.js'

/** What a stop leaves for settling with the shared state when the drain and flushes used all of shutdown_timeout_ms. */
const SETTLE_AT_LEAST_MS = 1000
import { NO_ITEM_METRICS, componentMetrics, createTelemetry, httpRequestMetrics, type Telemetry } from '../core/telemetry.js'

export type ServiceState = 'created' | 'starting' | 'ready' | 'draining' | 'stopped'

export interface ServiceOptions {
  config: MeterdConfig
  plan: Plan
  telemetry?: Telemetry
  /** Injectable clock for tests (ms since epoch). */
  now?: () => number
  /** The bus to the other workers when this process is one of several (default: LOCAL). */
  cluster?: ClusterBus
}

/**
 * The running daemon: opens the store, builds the graph, starts components in
 * dependency order, serves the base URL, and drains in reverse on shutdown.
 */
export class Service implements Host {
  readonly logger: Logger
  readonly registry: Registry
  readonly store: Store
  readonly usage: UsageRecords
  readonly http: HttpServer
  readonly admission = new Admission()
  readonly server: ServerConfig
  shared?: SharedState
  readonly cluster: ClusterBus
  state: ServiceState = 'created'
  private graph?: Graph
  private started: { key: string; component: Component }[] = []
  private readonly clock: () => number

  constructor(private readonly opts: ServiceOptions) {
    const t = opts.telemetry ?? createTelemetry({ level: opts.config.service.telemetry.logs.level })
    this.logger = t.logger
    this.registry = t.registry
    this.server = opts.config.server
    this.clock = opts.now ?? Date.now
    this.cluster = opts.cluster ?? LOCAL
    const storage = opts.config.storage
    try {
      this.store = new Store({
      path: storage.path,
      maxSizeMb: storage.max_size_mb,
      // One process writes space ahead: the leader when several workers share the file.
      preallocateMb: this.cluster.leader ? storage.preallocate_mb : 0,
      onPreallocateError: (err) => this.logger.warn({ err }, 'could not write space ahead in the data file; trying again in a minute'),
      writeHealth: {
        failed: (reason, becameUnwritable) => {
          writeFailures.inc()
          // Once per episode: under load every request fails the same way. While starting, a
          // failed write either stops the start (which says why) or is said once ready.
          if (becameUnwritable && this.state !== 'created' && this.state !== 'starting') this.logUnwritable(reason)
        },
        recovered: (ms) => this.logger.info({ unwritable_ms: ms }, 'the store writes again'),
      },
      })
    } catch (err) {
      throw dataDirFailure(err, storage.path)
    }
    this.usage = this.store.usage
    const writeFailures = new Counter({ name: 'meterd_store_write_failures_total', help: 'Writes whose LMDB commit failed (a full disk, an I/O error); nothing of them was stored', registers: [this.registry] })
    const store = this.store
    new Gauge({
      name: 'meterd_store_writable',
      help: '1 while the store commits writes, 0 after a failed commit until a write succeeds again',
      registers: [this.registry],
      aggregator: 'min', // several workers: 0 when any of them cannot write
      collect() {
        this.set(store.health.writable ? 1 : 0)
      },
    })
    if (this.store.tightened.length)
      this.logger.warn({ paths: this.store.tightened }, 'the data directory was readable by every user: took that access away (it holds usage records and keys)')
    bodyBudget.limit = this.server.max_body_bytes_in_flight
    this.http = new HttpServer({
      apiPrefix: this.server.api_prefix,
      maxBodyBytes: this.server.max_body_bytes,
      maxJsonDepth: this.server.max_json_depth,
      logger: this.logger.child({ component: 'http' }),
      admission: this.admission,
      requests: httpRequestMetrics(this.registry),
    })
  }

  now(): number {
    return this.clock()
  }

  getExtension<T = unknown>(id: string): T | undefined {
    return this.graph?.extensions.get(id) as T | undefined
  }

  /** A running component by kind and id (`receiver`, `otlp`), for tests and tools. */
  component<T = Component>(kind: Kind, id: string): T | undefined {
    return this.graph?.ordered.find((e) => e.key === `${kind}:${id}`)?.component as T | undefined
  }

  extensions(): ReadonlyMap<string, Component> {
    return this.graph?.extensions ?? new Map()
  }

  async start(): Promise<AddressInfo> {
    this.state = 'starting'
    const { config, plan } = this.opts
    this.graph = await build(config, plan, (kind: Kind, id: string) => ({
      id,
      logger: this.logger.child({ kind, component: id }),
      // Extensions handle no items: counters of theirs could never move.
      metrics: kind === 'extension' ? NO_ITEM_METRICS : componentMetrics(this.registry, kind, id.replace(/@.*/, '')),
      registry: this.registry,
    }))
    this.mountOperations()
    const shared = this.server.shared_state
    if (shared.backend === 'redis') {
      // ioredis loads only in gateway mode: standalone daemons keep their idle memory.
      const { openRedisSharedState } = await import('../store/redis/index.js')
      this.shared = await openRedisSharedState(shared.redis, this.store, this.logger.child({ component: 'shared-state' }), this.registry)
    }
    for (const entry of this.graph.ordered) {
      await entry.component.start(this)
      this.started.push(entry)
    }
    this.warnLeftBehindQueues()
    const addr = await this.http.listen(this.server.endpoint).catch((err) => {
      throw listenFailure(err, this.server.endpoint, 'server.endpoint')
    })
    this.state = 'ready'
    if (!this.store.health.writable) this.logUnwritable(this.store.health.reason)
    this.logger.info({ address: `${addr.address}:${addr.port}`, pipelines: this.graph.pipelines }, 'meterd is ready')
    return addr
  }

  /**
   * Records a forwarding exporter acknowledged stay in its queue, named by its id: when the id is
   * renamed or the exporter removed, nothing sends them. Say so at every start, so a 201 is not
   * silently stranded.
   */
  private warnLeftBehindQueues(): void {
    const ids = this.graph!.ordered.filter((e) => e.key.startsWith('exporter:')).map((e) => e.key.slice('exporter:'.length))
    for (const type of ['upstream', 'clickhouse']) {
      const names = new Set(ids.filter((id) => id.split('/')[0] === type).map((id) => id.replace('/', '_')))
      for (const q of leftBehindQueues(this.store, type, names)) {
        const id = q.name.replace('_', '/')
        this.logger.warn({ queue: `${type}-queue:${q.name}`, records: q.entries }, `exporter "${id}" is no longer configured but its queue holds records it acknowledged; they are not sent until an exporter "${id}" is configured again`)
      }
    }
  }

  private logUnwritable(reason: string | undefined): void {
    this.logger.error({ reason }, 'the store cannot write: requests that store data answer 503 until it can; /readyz is not ready')
  }

  /**
   * Receivers stop first (no new data), then the listener drains, then everything downstream
   * flushes, then what the replica owes the shared state is settled in what is left of
   * shutdown_timeout_ms, and at least SETTLE_AT_LEAST_MS (the supervisor kills a worker 2 s past it).
   */
  async shutdown(): Promise<void> {
    if (this.state === 'stopped' || this.state === 'draining') return
    this.state = 'draining'
    const deadline = this.server.shutdown_timeout_ms
    const until = Date.now() + deadline
    await this.http.close(deadline)
    for (const { key, component } of [...this.started].reverse()) {
      try {
        await component.shutdown()
      } catch (err) {
        this.logger.error({ err, component: key }, 'shutdown failed')
      }
    }
    this.started = []
    // Only this replica knows what it owes Redis: even a drain that used the whole timeout
    // leaves it a try, within the 2 s the supervisor (or run's own exit timer) allows past it.
    await this.shared?.close(Math.max(until - Date.now(), SETTLE_AT_LEAST_MS))
    await this.store.close()
    this.state = 'stopped'
    this.logger.info('meterd stopped')
    this.logger.flush?.()
  }

  /** This process's metrics, or with several workers every ready worker's, combined by the supervisor. */
  private async metricsText(): Promise<string> {
    if (this.cluster.workers <= 1) return this.registry.metrics()
    try {
      return await this.cluster.request<string>('metrics', null, 5000)
    } catch (err) {
      this.logger.warn({ err }, 'the workers\' metrics could not be gathered')
      throw new ApiError(503, 'api_error', 'unavailable', 'the workers\' metrics could not be gathered; retry', { headers: { 'retry-after': '1' } })
    }
  }

  private mountOperations(): void {
    const pipelines = this.graph!.pipelines
    new Gauge({
      name: 'meterd_up',
      help: '1 while the daemon is ready',
      registers: [this.registry],
      aggregator: 'min', // with several workers: 1 when every one is up
      collect: () => undefined,
    }).set(1)
    storeGauges(this.registry, this.store, this.opts.config.storage)
    this.http.route({
      method: 'GET',
      path: '/healthz',
      bucket: null,
      scope: null,
      handler: () => {
        // A supervisor alive but stuck leaves this worker waiting for every rate-limit lease (and
        // node:cluster hands it no new connection): not live, so a liveness probe restarts the daemon.
        const since = this.cluster.unresponsiveSince()
        if (since === undefined) return { status: 200, body: { status: 'ok' } }
        const seconds = Math.round((Date.now() - since) / 1000)
        return {
          status: 503,
          body: {
            status: 'supervisor_unresponsive',
            reason: `the supervisor process has answered nothing for ${seconds} s (stopped or stuck); restart the daemon`,
            since: new Date(since).toISOString(),
          },
        }
      },
    })
    this.http.route({
      method: 'GET',
      path: '/readyz',
      bucket: null,
      scope: null,
      handler: () => {
        const ready = this.state === 'ready'
        const pipelineStates = Object.fromEntries(pipelines.map((p) => [p, ready ? 'running' : this.state]))
        const health = this.store.health
        if (ready && !health.writable) {
          // Up, but whatever stores data answers 503: send traffic elsewhere until the store writes again.
          return {
            status: 503,
            body: { status: 'store_unwritable', reason: health.reason, since: new Date(health.since ?? Date.now()).toISOString(), pipelines: pipelineStates },
          }
        }
        return { status: ready ? 200 : 503, body: { status: ready ? 'ready' : this.state, pipelines: pipelineStates } }
      },
    })
    // The error reference every doc_url points to (DOC_PATH), from the package's docs/.
    let reference = '# meterd errors\n\nThis installation has no docs/errors.md.\n'
    try {
      reference = readFileSync(join(PACKAGE_ROOT, 'docs', 'errors.md'), 'utf8')
    } catch {}
    this.http.route({
      method: 'GET',
      path: DOC_PATH,
      bucket: null,
      scope: null,
      handler: () => ({ status: 200, text: reference, contentType: 'text/markdown; charset=utf-8' }),
    })
    this.http.route({
      method: 'GET',
      path: '/metrics',
      bucket: null,
      scope: null,
      // With several workers, the supervisor combines the ready workers' registries (prom-client's AggregatorRegistry.aggregate).
      handler: async () => ({ status: 200, text: await this.metricsText(), contentType: this.registry.contentType }),
    })
  }
}
