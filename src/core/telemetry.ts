import { pino, type Logger } from 'pino'
import { Counter, Registry, collectDefaultMetrics } from 'prom-client'

/** The daemon's own telemetry: one pino logger and one Prometheus registry. */
export interface Telemetry {
  logger: Logger
  registry: Registry
}

export function createTelemetry(opts: { level?: string; destination?: NodeJS.WritableStream } = {}): Telemetry {
  const logger = pino(
    { level: opts.level ?? process.env.METERD_LOG_LEVEL ?? 'info', base: { service: 'meterd' } },
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

interface ComponentCounters {
  accepted: Counter
  refused: Counter
  failed: Counter
  /** Moves each component's pending counts into the counters; runs when /metrics is collected. */
  flushers: (() => void)[]
}

const counters = new WeakMap<Registry, ComponentCounters>()

export function componentMetrics(registry: Registry, kind: string, id: string): ComponentMetrics {
  let c = counters.get(registry)
  if (!c) {
    const labelNames = ['kind', 'component'] as const
    const flushers: (() => void)[] = []
    const collect = (): void => {
      for (const f of flushers) f()
    }
    c = {
      accepted: new Counter({ name: 'meterd_component_accepted_items_total', help: 'Items a component accepted', labelNames, registers: [registry], collect }),
      refused: new Counter({ name: 'meterd_component_refused_items_total', help: 'Items a component refused as invalid', labelNames, registers: [registry], collect }),
      failed: new Counter({ name: 'meterd_component_failed_items_total', help: 'Items a component failed to handle', labelNames, registers: [registry], collect }),
      flushers,
    }
    counters.set(registry, c)
  }
  const labels = { kind, component: id }
  const a = c.accepted.labels(labels)
  const r = c.refused.labels(labels)
  const f = c.failed.labels(labels)
  // Pre-create the series so /metrics shows zeros from start-up.
  a.inc(0), r.inc(0), f.inc(0)
  // Every request counts in several components: a plain addition here, prom-client's labelled
  // increment (a label hash per call) only when /metrics is scraped.
  const pending = { accepted: 0, refused: 0, failed: 0 }
  c.flushers.push(() => {
    if (pending.accepted) a.inc(pending.accepted), (pending.accepted = 0)
    if (pending.refused) r.inc(pending.refused), (pending.refused = 0)
    if (pending.failed) f.inc(pending.failed), (pending.failed = 0)
  })
  return {
    accepted: (n) => void (pending.accepted += n),
    refused: (n) => void (pending.refused += n),
    failed: (n) => void (pending.failed += n),
  }
}

/** A counter created once per registry (components may be built several times in tests). */
export function sharedCounter(registry: Registry, name: string, help: string, labelNames: string[] = []): Counter {
  const existing = registry.getSingleMetric(name)
  if (existing) return existing as Counter
  return new Counter({ name, help, labelNames, registers: [registry] })
}

/** Bumps a labelled count by one. */
export type Tally = (labels: Record<string, string>) => void

const tallies = new WeakMap<Registry, Map<string, Tally>>()

/**
 * A labelled counter for per-record events (priced, unpriced, unattributed): a bump is a plain
 * addition, and the sums reach the prom-client counter when /metrics is collected. Created once
 * per registry and name, like sharedCounter.
 */
export function tally(registry: Registry, name: string, help: string, labelNames: string[]): Tally {
  let byName = tallies.get(registry)
  if (!byName) tallies.set(registry, (byName = new Map()))
  const existing = byName.get(name)
  if (existing) return existing
  const pending = new Map<string, { labels: Record<string, string>; n: number }>()
  new Counter({
    name,
    help,
    labelNames,
    registers: [registry],
    collect() {
      for (const p of pending.values()) {
        if (p.n) this.inc(p.labels, p.n)
        p.n = 0
      }
    },
  })
  const bump: Tally = (labels) => {
    const key = labelNames.map((l) => labels[l]).join('\0')
    let p = pending.get(key)
    if (!p) pending.set(key, (p = { labels: { ...labels }, n: 0 }))
    p.n++
  }
  byName.set(name, bump)
  return bump
}
