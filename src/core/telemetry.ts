import { pino, type Logger } from 'pino'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { Counter, Gauge, Registry, collectDefaultMetrics, type Metric } from 'prom-client'
import { PACKAGE_ROOT } from './paths.js'

/** The daemon's own telemetry: one pino logger and one Prometheus registry. */
export interface Telemetry {
  logger: Logger
  registry: Registry
}

/**
 * `defaultMetrics: false` leaves out prom-client's process and Node.js metrics, whose event-loop
 * monitor samples every 10 ms: for a process whose registry nobody reads (a clustered daemon's
 * supervisor; /metrics combines its workers') that is CPU spent for nothing.
 */
export function createTelemetry(opts: { level?: string; destination?: NodeJS.WritableStream; bindings?: Record<string, unknown>; defaultMetrics?: boolean } = {}): Telemetry {
  const logger = pino(
    { level: opts.level ?? process.env.METERD_LOG_LEVEL ?? 'info', base: { service: 'meterd', ...opts.bindings } },
    opts.destination ?? pino.destination({ dest: 2, sync: false }),
  )
  const registry = new Registry()
  // The standard names (process_*, nodejs_*), so stock Node.js dashboards work unchanged.
  if (opts.defaultMetrics !== false) collectDefaultMetrics({ register: registry })
  new Gauge({ name: 'meterd_build_info', help: 'Always 1; the labels say which meterd and Node.js run', labelNames: ['version', 'node'], registers: [registry], aggregator: 'max' })
    .labels({ version: PACKAGE_VERSION, node: process.versions.node })
    .set(1)
  return { logger, registry }
}

const PACKAGE_VERSION = (JSON.parse(readFileSync(join(PACKAGE_ROOT, 'package.json'), 'utf8')) as { version: string }).version

const REQUEST_SECONDS = 'meterd_http_request_duration_seconds'
const REQUEST_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

/** One (method, route, status) series: counts per bucket (not cumulative; the last is +Inf), sum and count. */
interface RequestSeries {
  labels: { method: string; route: string; status: string }
  buckets: Float64Array
  sum: number
  count: number
}

/**
 * HTTP requests by method, route template and status, with their duration: the histogram's
 * `_count` is the request rate. Every answered request is observed, so an observation is a few
 * additions into its series' own counters (found without building a label key), and the
 * Prometheus form is built when `/metrics` is collected: prom-client's bound histogram
 * converted, validated and hashed the labels on every call (about 6,000 instructions per
 * request; docs/performance.md). Exposed as prom-client's Histogram exposes it (`get()`, summed
 * across workers).
 */
export function httpRequestMetrics(registry: Registry): { observe(method: string, route: string, status: number, seconds: number): void } {
  if (registry.getSingleMetric(REQUEST_SECONDS)) registry.removeSingleMetric(REQUEST_SECONDS)
  const all: RequestSeries[] = []
  const series = new Map<string, Map<string, Map<number, RequestSeries>>>()
  const metric = {
    name: REQUEST_SECONDS,
    help: 'HTTP requests answered, by method, route template and status, and how long each took',
    type: 'histogram',
    aggregator: 'sum',
    get() {
      const values: { labels: Record<string, string | number>; value: number; metricName: string }[] = []
      for (const s of all) {
        let acc = 0
        for (let i = 0; i < REQUEST_BUCKETS.length; i++) {
          acc += s.buckets[i]
          values.push({ labels: { le: REQUEST_BUCKETS[i], ...s.labels }, value: acc, metricName: `${REQUEST_SECONDS}_bucket` })
        }
        values.push({ labels: { le: '+Inf', ...s.labels }, value: s.count, metricName: `${REQUEST_SECONDS}_bucket` })
        values.push({ labels: { ...s.labels }, value: s.sum, metricName: `${REQUEST_SECONDS}_sum` })
        values.push({ labels: { ...s.labels }, value: s.count, metricName: `${REQUEST_SECONDS}_count` })
      }
      return Promise.resolve({ name: REQUEST_SECONDS, help: metric.help, type: 'histogram', values, aggregator: 'sum' })
    },
    reset() {
      for (const s of all) {
        s.buckets.fill(0)
        s.sum = 0
        s.count = 0
      }
    },
  }
  registry.registerMetric(metric as unknown as Metric)
  return {
    observe(method, route, status, seconds) {
      let byMethod = series.get(route)
      if (!byMethod) series.set(route, (byMethod = new Map()))
      let byStatus = byMethod.get(method)
      if (!byStatus) byMethod.set(method, (byStatus = new Map()))
      let s = byStatus.get(status)
      if (!s) {
        s = { labels: { method, route, status: String(status) }, buckets: new Float64Array(REQUEST_BUCKETS.length), sum: 0, count: 0 }
        byStatus.set(status, s)
        all.push(s)
      }
      let i = 0
      while (i < REQUEST_BUCKETS.length && seconds > REQUEST_BUCKETS[i]) i++
      if (i < REQUEST_BUCKETS.length) s.buckets[i]++
      s.sum += seconds
      s.count++
    },
  }
}

/** What a component that handles no items (an extension) gets: it has nothing to count. */
export const NO_ITEM_METRICS: ComponentMetrics = { accepted: () => undefined, refused: () => undefined, failed: () => undefined }

/** Items a component accepted, refused (bad data) and failed on (its own or a downstream fault). */
export interface ComponentMetrics {
  accepted(n: number): void
  refused(n: number): void
  failed(n: number): void
}

export function componentMetrics(registry: Registry, kind: string, id: string): ComponentMetrics {
  const labels = { kind, component: id }
  const labelNames = ['kind', 'component']
  return {
    accepted: tally(registry, 'meterd_component_accepted_items_total', 'Items a component accepted', labelNames).bind(labels),
    refused: tally(registry, 'meterd_component_refused_items_total', 'Items a component refused as invalid', labelNames).bind(labels),
    failed: tally(registry, 'meterd_component_failed_items_total', 'Items a component failed to handle', labelNames).bind(labels),
  }
}

/** A counter created once per registry (components may be built several times in tests). */
export function sharedCounter(registry: Registry, name: string, help: string, labelNames: string[] = []): Counter {
  const existing = registry.getSingleMetric(name)
  if (existing) return existing as Counter
  return new Counter({ name, help, labelNames, registers: [registry] })
}

/** A labelled counter whose increments are plain additions (see tally). */
export interface Tally {
  /** Adds n (default 1) to the series of these labels. */
  inc(labels: Record<string, string>, n?: number): void
  /** The series of these labels as an adder of its own, shown (as 0) from now on. */
  bind(labels: Record<string, string>): (n: number) => void
}

const tallies = new WeakMap<Registry, Map<string, Tally>>()

/**
 * A counter for what every request counts (component items; priced, unpriced, unattributed
 * records): an increment is a plain addition, and the sums reach prom-client (which hashes the
 * labels on every increment) when /metrics is collected. Created once per registry and name,
 * like sharedCounter.
 */
export function tally(registry: Registry, name: string, help: string, labelNames: string[]): Tally {
  let byName = tallies.get(registry)
  if (!byName) tallies.set(registry, (byName = new Map()))
  const existing = byName.get(name)
  if (existing) return existing
  interface Series {
    labels: Record<string, string>
    n: number
  }
  const all: Series[] = []
  new Counter({
    name,
    help,
    labelNames,
    registers: [registry],
    collect() {
      for (const p of all) {
        this.inc(p.labels, p.n)
        p.n = 0
      }
    },
  })
  // One Map level per label, looked up by the values as they come: no key is built per increment.
  const root = new Map<unknown, unknown>()
  const series = (labels: Record<string, string>): Series => {
    let level = root
    for (let i = 0; i < labelNames.length - 1; i++) {
      const v = labels[labelNames[i]]
      let next = level.get(v) as Map<unknown, unknown> | undefined
      if (!next) level.set(v, (next = new Map()))
      level = next
    }
    const last = labelNames.length ? labels[labelNames[labelNames.length - 1]] : ''
    let p = level.get(last) as Series | undefined
    if (!p) {
      level.set(last, (p = { labels: { ...labels }, n: 0 }))
      all.push(p)
    }
    return p
  }
  const t: Tally = {
    inc: (labels, n = 1) => void (series(labels).n += n),
    bind: (labels) => {
      const p = series(labels)
      return (n) => void (p.n += n)
    },
  }
  byName.set(name, t)
  return t
}

/** One gauge of instanceGauges: its name, help, and the value it takes from an instance's stats. */
export interface InstanceGauge<S> {
  name: string
  help: string
  pick(stats: S): number
}

const instanceSets = new WeakMap<Registry, Map<string, Set<{ stats(): { id: string } }>>>()

/**
 * Gauges labelled by component id whose values are read from the running instances when /metrics
 * is collected (queue depths, oldest ages). Returns the registry's set of instances for these
 * gauges: add an instance at start, delete it at shutdown. `aggregator` is how workers' values
 * combine (`max` when they all see one shared queue).
 */
export function instanceGauges<S extends { id: string }>(
  registry: Registry,
  gauges: InstanceGauge<S>[],
  aggregator?: 'sum' | 'max',
): Set<{ stats(): S }> {
  let byName = instanceSets.get(registry)
  if (!byName) instanceSets.set(registry, (byName = new Map()))
  const key = gauges[0].name
  const existing = byName.get(key)
  if (existing) return existing as Set<{ stats(): S }>
  const instances = new Set<{ stats(): S }>()
  byName.set(key, instances)
  for (const g of gauges)
    new Gauge({
      name: g.name,
      help: g.help,
      labelNames: ['exporter'],
      registers: [registry],
      ...(aggregator ? { aggregator } : {}),
      collect() {
        this.reset()
        for (const i of instances) {
          const s = i.stats()
          this.set({ exporter: s.id }, g.pick(s))
        }
      },
    })
  return instances
}
