import type { Component, ConsumingComponent, CreateSettings, Factory, Kind, SignalConsumers } from './component.js'
import { SECTION, componentType, pipelineSignal } from './component.js'
import type { Batch, Consumer, Signal, SpanInterest } from '../core/consumer.js'
import { SIGNALS } from '../core/consumer.js'
import { checkAgainst, type ConfigIssue, type MeterdConfig } from '../core/config/schema.js'
import { fanout, takeOnce, type Branch } from './fanout.js'
import { existsSync, statSync } from 'node:fs'
import { DEFAULT_CONFIG_PATH } from '../core/config/load.js'
import { parseEndpoint, sameListener } from '../core/endpoint.js'

export type Factories = ReadonlyMap<string, Factory>

export function factoryMap(list: readonly Factory[]): Map<string, Factory> {
  const m = new Map<string, Factory>()
  for (const f of list) m.set(`${f.kind}:${f.type}`, f)
  return m
}

interface Planned {
  id: string
  kind: Kind
  factory: Factory
  config: unknown
  /** Its config passed its schema (its factory's check may run). */
  valid: boolean
}

export interface Plan {
  components: Map<string, Planned> // key `${kind}:${id}`
  issues: ConfigIssue[]
}

/**
 * Checks everything that can be checked without starting anything: every component's
 * config against its factory's schema, every reference in service.pipelines, signal
 * support, connector use on both sides, and cycles through connectors. Collects all
 * issues, each with its config path (what `meterd validate` prints).
 */
export function plan(config: MeterdConfig, factories: Factories): Plan {
  const issues: ConfigIssue[] = []
  const components = new Map<string, Planned>()
  const kinds: Kind[] = ['receiver', 'processor', 'exporter', 'connector', 'extension']

  for (const kind of kinds) {
    const section = SECTION[kind]
    const entries = (config as unknown as Record<string, Record<string, unknown>>)[section] ?? {}
    for (const [id, raw] of Object.entries(entries)) {
      const type = componentType(id)
      if (!/^[a-z][a-z0-9_]*(\/[A-Za-z0-9_.-]+)?$/.test(id)) {
        issues.push({ path: `${section}.${id}`, message: 'a component id is `type` or `type/name`' })
        continue
      }
      const factory = factories.get(`${kind}:${type}`)
      if (!factory) {
        issues.push({ path: `${section}.${id}`, message: `unknown ${kind} type "${type}" (see \`meterd components\`)` })
        continue
      }
      const checked = checkAgainst(factory.schema, raw ?? {}, `${section}.${id}`)
      issues.push(...checked.issues)
      components.set(`${kind}:${id}`, { id, kind, factory, config: checked.value, valid: checked.issues.length === 0 })
    }
  }

  config.service.extensions.forEach((id, i) => {
    if (!components.has(`extension:${id}`)) issues.push({ path: `service.extensions[${i}]`, message: `extension "${id}" is not configured under extensions` })
  })

  const connectorUse = new Map<string, { asExporter: Signal[]; asReceiver: Signal[] }>()
  const processorUse = new Map<string, Signal[]>()
  for (const [pid, p] of Object.entries(config.service.pipelines)) {
    const signal = pipelineSignal(pid) as Signal
    const base = `service.pipelines.${pid}`
    if (!SIGNALS.includes(signal)) {
      issues.push({ path: base, message: `pipeline id must be a signal (${SIGNALS.join(', ')}) or signal/name` })
      continue
    }
    const check = (list: string[], field: string, want: Kind[]): void => {
      const seen = new Set<string>()
      list.forEach((id, i) => {
        const path = `${base}.${field}[${i}]`
        if (seen.has(id)) issues.push({ path, message: `"${id}" is listed twice` })
        seen.add(id)
        const kind = want.find((k) => components.has(`${k}:${id}`))
        if (!kind) {
          issues.push({ path, message: `${want.join(' or ')} "${id}" is not configured` })
          return
        }
        const f = components.get(`${kind}:${id}`)!.factory
        if (kind === 'connector') {
          const use = connectorUse.get(id) ?? { asExporter: [], asReceiver: [] }
          ;(field === 'exporters' ? use.asExporter : use.asReceiver).push(signal)
          connectorUse.set(id, use)
        } else if ('signals' in f && !f.signals.includes(signal)) {
          issues.push({ path, message: `${kind} "${id}" does not support the ${signal} signal (it supports ${f.signals.join(', ')})` })
        } else if (kind === 'processor') {
          processorUse.set(id, [...(processorUse.get(id) ?? []), signal])
        }
      })
    }
    check(p.receivers, 'receivers', ['receiver', 'connector'])
    check(p.processors ?? [], 'processors', ['processor'])
    check(p.exporters, 'exporters', ['exporter', 'connector'])
  }

  for (const [id, use] of connectorUse) {
    const f = components.get(`connector:${id}`)!.factory
    if (f.kind !== 'connector') continue
    if (!use.asExporter.length || !use.asReceiver.length) {
      issues.push({ path: `connectors.${id}`, message: 'a connector must be used as an exporter in one pipeline and as a receiver in another' })
      continue
    }
    for (const from of use.asExporter)
      for (const to of use.asReceiver)
        if (!f.connects.some(([a, b]) => a === from && b === to))
          issues.push({ path: `connectors.${id}`, message: `connector "${id}" cannot connect ${from} to ${to}` })
  }

  runChecks(config, components, issues, processorUse, connectorUse)

  const cycle = findCycle(config)
  if (cycle) issues.push({ path: 'service.pipelines', message: `cycle through connectors: ${cycle.join(' → ')}` })

  return { components, issues }
}

/**
 * What a config needs to be run rather than read (by `keys`, `reprice`): at least one
 * pipeline. `validate` and `run` check it; the other commands only need the storage section.
 */
export function runnableIssues(config: MeterdConfig): ConfigIssue[] {
  const issues: ConfigIssue[] = []
  if (Object.keys(config.service.pipelines).length === 0)
    issues.push({
      path: 'service.pipelines',
      message:
        `no pipeline is configured, so nothing would be received. A --config file given alone replaces the embedded default: to override it, give the default first (--config ${DEFAULT_CONFIG_PATH} --config yours.yaml)`,
    })

  return issues
}

/**
 * The factories' own checks (CheckContext) for every component the service uses whose config
 * passed its schema, and every listener's endpoint and port.
 */
function runChecks(
  config: MeterdConfig,
  components: Map<string, Planned>,
  issues: ConfigIssue[],
  processorUse: Map<string, Signal[]>,
  connectorUse: Map<string, { asExporter: Signal[]; asReceiver: Signal[] }>,
): void {
  const used = new Set<string>(config.service.extensions.map((id) => `extension:${id}`))
  for (const p of Object.values(config.service.pipelines))
    for (const id of [...p.receivers, ...(p.processors ?? []), ...p.exporters])
      for (const kind of ['receiver', 'processor', 'exporter', 'connector'] as Kind[]) used.add(`${kind}:${id}`)
  const listeners: { path: string; host: string; port: number }[] = []
  const listener = (path: string, endpoint: string): void => {
    let parsed
    try {
      parsed = parseEndpoint(endpoint)
    } catch (err) {
      issues.push({ path, message: (err as Error).message })
      return
    }
    const other = listeners.find((l) => sameListener(l, parsed))
    if (other) issues.push({ path, message: `port ${parsed.port} is already taken by ${other.path}` })
    listeners.push({ path, ...parsed })
  }
  listener('server.endpoint', config.server.endpoint)
  const data = config.storage.path
  if (existsSync(data) && !statSync(data).isDirectory()) issues.push({ path: 'storage.path', message: `${data} is a file, not a directory` })
  for (const [key, c] of components) {
    // A component the service does not use is never started: nothing of it can fail.
    if (!c.valid || !c.factory.check || !used.has(key)) continue
    const path = `${SECTION[c.kind]}.${c.id}`
    if (issues.some((i) => i.path === path || i.path.startsWith(`${path}.`))) continue
    const at = (sub: string) => (sub ? `${path}.${sub}` : path)
    const signals = c.kind === 'processor' ? processorUse.get(c.id) : c.kind === 'connector' ? connectorUse.get(c.id)?.asExporter : undefined
    const returned = c.factory.check(c.config, {
      id: c.id,
      path,
      signals: [...new Set(signals ?? [])],
      pipelines: config.service.pipelines,
      issue: (sub, message) => issues.push({ path: at(sub), message }),
      extensionType: (id) => (config.service.extensions.includes(id) ? components.get(`extension:${id}`)?.factory.type : undefined),
      listener: (sub, endpoint) => listener(at(sub), endpoint),
    })
    if (returned) issues.push(...returned)
  }
}

/** Pipelines are nodes; a connector exporting from A and receiving into B is an edge A → B. */
function findCycle(config: MeterdConfig): string[] | undefined {
  const pipelines = Object.entries(config.service.pipelines)
  const edges = new Map<string, string[]>()
  for (const [a, pa] of pipelines) {
    edges.set(
      a,
      pipelines.filter(([, pb]) => pa.exporters.some((id) => config.connectors[id] !== undefined && pb.receivers.includes(id))).map(([b]) => b),
    )
  }
  const state = new Map<string, 'visiting' | 'done'>()
  const stack: string[] = []
  const visit = (p: string): string[] | undefined => {
    if (state.get(p) === 'done') return undefined
    if (state.get(p) === 'visiting') return [...stack.slice(stack.indexOf(p)), p]
    state.set(p, 'visiting')
    stack.push(p)
    for (const q of edges.get(p) ?? []) {
      const c = visit(q)
      if (c) return c
    }
    stack.pop()
    state.set(p, 'done')
    return undefined
  }
  for (const [p] of pipelines) {
    const c = visit(p)
    if (c) return c
  }
  return undefined
}

/** A pipeline's entry point, wired once everything is created (connectors may point backwards in creation order). */
class Entry implements Consumer<any> {
  target?: Consumer<any>
  consume(batch: Batch<any>): Promise<void> {
    return this.target!.consume(batch)
  }

  get spanInterest(): SpanInterest | undefined {
    return this.target?.spanInterest
  }
}

export interface Graph {
  /** In start order: extensions, exporters, connectors, processors, receivers. */
  ordered: { key: string; component: Component }[]
  extensions: Map<string, Component>
  pipelines: string[]
}

export async function build(config: MeterdConfig, p: Plan, settings: (kind: Kind, id: string) => CreateSettings): Promise<Graph> {
  const pipelines = Object.entries(config.service.pipelines)
  const entries = new Map(pipelines.map(([pid]) => [pid, new Entry()]))
  const planned = (kind: Kind, id: string): Planned => p.components.get(`${kind}:${id}`)!

  // Each pipeline that lists `id` as a receiver, by pipeline id.
  const fedPipelines = (id: string): Map<string, Consumer<any>> =>
    new Map(pipelines.filter(([, pl]) => pl.receivers.includes(id)).map(([pid]) => [pid, entries.get(pid)!]))

  // Consumers feeding the pipelines that list `id` as a receiver, per signal.
  const feeds = (id: string): SignalConsumers => {
    const out: SignalConsumers = {}
    for (const signal of SIGNALS) {
      const targets = pipelines.filter(([pid, pl]) => pipelineSignal(pid) === signal && pl.receivers.includes(id))
      if (targets.length) out[signal] = fanout(targets.map(([pid]) => ({ id: pid, consumer: entries.get(pid)!, mutatesData: true })))
    }
    return out
  }

  // The implementations the service uses, imported together rather than one create at a time.
  await Promise.all([...new Set([...p.components.values()].map((c) => c.factory))].map((f) => f.load?.()))

  const extensions = new Map<string, Component>()
  for (const id of config.service.extensions) {
    const pl = planned('extension', id)
    if (pl.factory.kind === 'extension') extensions.set(id, await pl.factory.create(settings('extension', id), pl.config))
  }

  const exporters = new Map<string, ConsumingComponent>()
  const connectors = new Map<string, ConsumingComponent>()
  for (const [, pl] of pipelines)
    for (const id of pl.exporters) {
      if (p.components.has(`connector:${id}`)) {
        if (!connectors.has(id)) {
          const c = planned('connector', id)
          if (c.factory.kind === 'connector') connectors.set(id, await c.factory.create(settings('connector', id), c.config, feeds(id), fedPipelines(id)))
        }
      } else if (!exporters.has(id)) {
        const e = planned('exporter', id)
        if (e.factory.kind === 'exporter') exporters.set(id, await e.factory.create(settings('exporter', id), e.config))
      }
    }

  // How many pipelines of each signal end in each exporter or connector: one that several share
  // takes each item once, however many of them bring a copy of it (takeOnce).
  const ends = new Map<string, number>()
  for (const [pid, pl] of pipelines)
    for (const id of pl.exporters) {
      const key = `${pipelineSignal(pid)}:${id}`
      ends.set(key, (ends.get(key) ?? 0) + 1)
    }

  const processors: Component[] = []
  for (const [pid, pl] of pipelines) {
    const signal = pipelineSignal(pid) as Signal
    const branches: Branch[] = pl.exporters.map((id) => {
      const c = exporters.get(id) ?? connectors.get(id)!
      const consumer = c.consumers[signal]
      if (!consumer) throw new Error(`${id} has no ${signal} consumer`)
      return { id, consumer: ends.get(`${signal}:${id}`)! > 1 ? takeOnce(consumer) : consumer, mutatesData: false }
    })
    let next = fanout(branches)
    for (const id of [...(pl.processors ?? [])].reverse()) {
      const pr = planned('processor', id)
      if (pr.factory.kind !== 'processor') continue
      const instance = await pr.factory.create(settings('processor', `${id}@${pid}`), pr.config, signal, next)
      processors.push(instance)
      next = instance
    }
    entries.get(pid)!.target = next
  }

  const receivers = new Map<string, Component>()
  for (const [, pl] of pipelines)
    for (const id of pl.receivers) {
      if (receivers.has(id) || connectors.has(id)) continue
      const r = planned('receiver', id)
      if (r.factory.kind === 'receiver') receivers.set(id, await r.factory.create(settings('receiver', id), r.config, feeds(id)))
    }

  const ordered = [
    ...[...extensions].map(([id, c]) => ({ key: `extension:${id}`, component: c })),
    ...[...exporters].map(([id, c]) => ({ key: `exporter:${id}`, component: c as Component })),
    ...[...connectors].map(([id, c]) => ({ key: `connector:${id}`, component: c as Component })),
    ...processors.map((c, i) => ({ key: `processor:${i}`, component: c })),
    ...[...receivers].map(([id, c]) => ({ key: `receiver:${id}`, component: c })),
  ]
  return { ordered, extensions, pipelines: pipelines.map(([pid]) => pid) }
}
