import type { ConnectorFactory, ConsumingComponent, CreateSettings, SignalConsumers } from '../../host/component.js'
import { pipelineSignal } from '../../host/component.js'
import type { Batch, Consumer, Signal } from '../../core/consumer.js'
import { partOf } from '../../core/part.js'
import { Copies } from '../../core/copies.js'
import { FanoutError } from '../../core/errors.js'
import { tally } from '../../core/telemetry.js'
import { FIELD_CATALOGS, compileCondition, type Predicate } from '../../domain/conditions/index.js'
import { ROUTABLE, routingDescriptor, type Config } from './descriptor.js'

/** One signal's routes, compiled, with the pipelines of that signal they feed. */
interface Table {
  routes: { when: Predicate; to: string[] }[]
  defaults: string[]
}

/**
 * Routes each item of a batch by the first route whose condition it meets (or every matching
 * route, `match_once: false`), else to the default pipelines (the Collector's routing connector,
 * Vector's `route`). The batch is split into one part per pipeline, every part is handed on at
 * once, and the batch resolves when every part is durable; a part that fails leaves the others'
 * outcome intact and is reported as its pipeline's branch of a FanoutError, as a fan-out is
 * (a retry then finds the stored parts by transactionId and stores nothing twice). An exporter
 * that several of the pipelines end in takes each record once (Copies, takeOnce).
 */
export class RoutingConnector implements ConsumingComponent {
  readonly consumers: SignalConsumers = {}
  private readonly unrouted: (n: number) => void

  constructor(private readonly settings: CreateSettings, private readonly config: Config, next: SignalConsumers, private readonly pipelines: ReadonlyMap<string, Consumer<any>>) {
    this.unrouted = tally(settings.registry, 'meterd_routing_unrouted_items_total', 'Items a routing connector dropped because no route matched and it has no default pipelines', ['component']).bind({ component: settings.id })
    for (const s of ROUTABLE) {
      if (!next[s]) continue
      const table = this.compile(s)
      this.consumers[s] = { consume: (b: Batch<unknown>) => this.route(table, b) }
    }
  }

  async start(): Promise<void> {}
  async shutdown(): Promise<void> {}

  private compile(signal: Signal): Table {
    const ofSignal = (ids: string[]): string[] => [...new Set(ids)].filter((pid) => pipelineSignal(pid) === signal && this.pipelines.has(pid))
    return {
      routes: this.config.table.map((r) => ({ when: compileCondition(r.condition, FIELD_CATALOGS[signal]!), to: ofSignal(r.pipelines) })),
      defaults: ofSignal(this.config.default_pipelines),
    }
  }

  /** The pipelines an item goes to. */
  private targets(table: Table, item: unknown): string[] {
    const { routes } = table
    if (this.config.match_once) {
      for (let i = 0; i < routes.length; i++) if (routes[i].when(item)) return routes[i].to
      return table.defaults
    }
    let out: string[] | undefined
    for (let i = 0; i < routes.length; i++) {
      if (!routes[i].when(item)) continue
      out = out ? [...new Set([...out, ...routes[i].to])] : routes[i].to
    }
    return out ?? table.defaults
  }

  private route(table: Table, batch: Batch<unknown>): Promise<void> {
    // Most requests hold one record, or records that all go the same way: the batch goes on whole.
    const { items } = batch
    const first = items.length ? this.targets(table, items[0]) : []
    let same = first.length === 1
    for (let i = 1; same && i < items.length; i++) same = this.targets(table, items[i]) === first
    if (same) {
      this.settings.metrics.accepted(items.length)
      return this.pipelines.get(first[0])!.consume(batch)
    }
    return this.split(table, batch)
  }

  private async split(table: Table, batch: Batch<unknown>): Promise<void> {
    // Per pipeline: its items and their indexes in the batch (to report item rejections by the client's index).
    const parts = new Map<string, { items: unknown[]; index: number[] }>()
    let dropped = 0
    for (let i = 0; i < batch.items.length; i++) {
      const item = batch.items[i]
      const to = this.targets(table, item)
      if (to.length === 0) {
        dropped++
        continue
      }
      for (let k = 0; k < to.length; k++) {
        let part = parts.get(to[k])
        if (!part) parts.set(to[k], (part = { items: [], index: [] }))
        // Pipelines change their items (processors mutate): an item going to several gets a copy
        // for each but the first, noted as a copy so that an exporter they share takes it once.
        if (k === 0) part.items.push(item)
        else {
          const copy = structuredClone(item)
          ;(batch.ctx.copies ??= new Copies()).add(item, copy)
          part.items.push(copy)
        }
        part.index.push(i)
      }
    }
    if (dropped) this.unrouted(dropped)
    this.settings.metrics.accepted(batch.items.length - dropped)
    if (parts.size === 0) return

    // Every part is handed on before any is awaited, so all their writes join the request's one write unit.
    const sent = [...parts].map(([pid, p]) => {
      const { part, settle } = partOf(batch, p.items, p.index)
      return { pid, settle, done: this.pipelines.get(pid)!.consume(part) }
    })
    const results = await Promise.allSettled(sent.map((s) => s.done))
    for (const s of sent) s.settle()
    if (results.every((r) => r.status === 'fulfilled')) return
    this.settings.metrics.failed(batch.items.length - dropped)
    throw new FanoutError(results.map((r, i) => ({ id: sent[i].pid, error: r.status === 'rejected' ? (r.reason as Error) : undefined })))
  }
}

export const routingFactory: ConnectorFactory<typeof routingDescriptor.schema> = {
  ...routingDescriptor,
  create: (settings, config, next, pipelines) => new RoutingConnector(settings, config, next, pipelines),
}
