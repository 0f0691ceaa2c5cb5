import { pino, type Logger } from 'pino'
import { Counter, Registry, collectDefaultMetrics } from 'prom-client'

/** The daemon's own telemetry: one pino logger and one Prometheus registry. */
export interface Telemetry {
  logger: Logger
  registry: Registry
}

export function createTelemetry(opts: { level?: string; destination?: NodeJS.WritableStream; bindings?: Record<string, unknown> } = {}): Telemetry {
  const logger = pino(
    { level: opts.level ?? process.env.METERD_LOG_LEVEL ?? 'info', base: { service: 'meterd', ...opts.bindings } },
    opts.destination ?? pino.destination({ dest: 2, sync: false }),
  )
  const registry = new Registry()
  collectDefaultMetrics({ register: registry, prefix: 'meterd_' })
  return { logger, registry }
}

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
