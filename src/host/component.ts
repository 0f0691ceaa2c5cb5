import type { TSchema, Static } from '@sinclair/typebox'
import type { Logger } from 'pino'
import type { Registry } from 'prom-client'
import type { Consumer, Signal } from '../core/consumer.js'
import type { ComponentMetrics } from '../core/telemetry.js'
import type { Admission } from '../transport/admission/index.js'
import type { HttpServer } from '../transport/http/server.js'
import type { Store } from '../store/store.js'
import type { ConfigIssue, MeterdConfig, ServerConfig } from '../core/config/schema.js'
import type { SharedState } from '../ports/shared.js'
import type { UsageRecords } from '../ports/usage.js'
import type { ClusterBus } from '../core/cluster/bus.js'

export type Kind = 'receiver' | 'processor' | 'exporter' | 'connector' | 'extension'
export const KINDS: readonly Kind[] = ['receiver', 'processor', 'exporter', 'connector', 'extension']
/** Config section of each kind. */
export const SECTION: Record<Kind, string> = {
  receiver: 'receivers',
  processor: 'processors',
  exporter: 'exporters',
  connector: 'connectors',
  extension: 'extensions',
}

/**
 * Lifecycle, after the Collector's component.Component: `start` is called once, in
 * dependency order (extensions, exporters, connectors, processors, receivers);
 * `shutdown` in the reverse order, may be called without `start`, must be idempotent,
 * and flushes what the component holds downstream before it resolves.
 */
export interface Component {
  start(host: Host): Promise<void>
  shutdown(): Promise<void>
}

/** What a running component can reach. */
export interface Host {
  readonly store: Store
  /** The usage records (src/ports/usage.ts): what stores and reads them goes through this, not `store`. */
  readonly usage: UsageRecords
  readonly http: HttpServer
  /** Admission for every transport: the apikeys and ratelimit extensions plug in here. */
  readonly admission: Admission
  readonly server: ServerConfig
  /** What replicas of a gateway cluster share (server.shared_state: redis); undefined when standalone. */
  readonly shared?: SharedState
  readonly logger: Logger
  readonly registry: Registry
  /** The other workers of this daemon (LOCAL when it runs as one process): see core/cluster/bus.ts. */
  readonly cluster: ClusterBus
  /** Injectable clock (ms since epoch), so tests can move time instead of sleeping. */
  now(): number
  getExtension<T = unknown>(id: string): T | undefined
  extensions(): ReadonlyMap<string, Component>
}

export interface CreateSettings {
  /** `type` or `type/name`. */
  id: string
  logger: Logger
  metrics: ComponentMetrics
  registry: Registry
}

export type SignalConsumers = Partial<Record<Signal, Consumer<any>>>

/** A component that consumes: processors, exporters, the input side of connectors. */
export interface ConsumingComponent extends Component {
  readonly consumers: SignalConsumers
}

/**
 * What `create` returns: the component, or a promise of it. A factory's module holds what reading a
 * config needs (schema, `check`); its `create` may load the implementation with `import()`, so
 * `meterd validate` and the other config commands do not load servers, clients and stores.
 */
export type Created<T> = T | Promise<T>

interface FactoryBase<S extends TSchema> {
  type: string
  description: string
  /** One schema: the TypeScript type, the defaults, validation with paths and the config reference. */
  schema: S
  /**
   * The checks its schema cannot make and `start` would otherwise make too late: a condition's
   * syntax, the pipelines a route names, files it reads, other components it needs, endpoints it
   * listens on — everything that needs no port, store or network. plan() runs it for the
   * components the service uses, on a config the schema accepted, so `meterd validate` and `meterd run` report the same, with paths. Issues are
   * returned (full paths) or reported through `ctx.issue` (paths below the component).
   */
  check?(config: Static<S>, ctx: CheckContext): ConfigIssue[] | void
  /** Loads what `create` needs ahead of it, so build() can load every implementation at once. */
  load?(): Promise<unknown>
}

/** What a factory's `check` can ask about the rest of the config, and where it reports. */
export interface CheckContext {
  id: string
  /** Config path of the component (`connectors.routing`); issues name paths below it. */
  path: string
  /** The signals it is used with: a processor's pipelines, a connector's exporting pipelines. */
  signals: Signal[]
  pipelines: MeterdConfig['service']['pipelines']
  /** Reports a problem at a path relative to the component (`grpc.endpoint`; '' for the component itself). */
  issue(path: string, message: string): void
  /** The type of the extension with this id when it is configured and listed in service.extensions. */
  extensionType(id: string): string | undefined
  /** Checks a listener's `host:port` and that no other listener of the config takes the same port. */
  listener(path: string, endpoint: string): void
}

export interface ReceiverFactory<S extends TSchema = TSchema> extends FactoryBase<S> {
  kind: 'receiver'
  signals: readonly Signal[]
  /** One instance per id, however many pipelines list it; `next` has a consumer per signal it feeds. */
  create(settings: CreateSettings, config: Static<S>, next: SignalConsumers): Created<Component>
}

export interface ProcessorFactory<S extends TSchema = TSchema> extends FactoryBase<S> {
  kind: 'processor'
  signals: readonly Signal[]
  /** One instance per pipeline, so processors never share state across pipelines by accident. */
  create(settings: CreateSettings, config: Static<S>, signal: Signal, next: Consumer<any>): Created<Component & Consumer<any>>
  mutatesData: boolean
}

export interface ExporterFactory<S extends TSchema = TSchema> extends FactoryBase<S> {
  kind: 'exporter'
  signals: readonly Signal[]
  create(settings: CreateSettings, config: Static<S>): Created<ConsumingComponent>
}

export interface ConnectorFactory<S extends TSchema = TSchema> extends FactoryBase<S> {
  kind: 'connector'
  /** Supported [from, to] signal pairs. */
  connects: readonly (readonly [Signal, Signal])[]
  /**
   * `next` feeds every pipeline that receives from the connector, per signal; `pipelines` holds
   * each of those pipelines alone, by pipeline id, for connectors that choose (routing).
   */
  create(settings: CreateSettings, config: Static<S>, next: SignalConsumers, pipelines: ReadonlyMap<string, Consumer<any>>): Created<ConsumingComponent>
}

export interface ExtensionFactory<S extends TSchema = TSchema> extends FactoryBase<S> {
  kind: 'extension'
  create(settings: CreateSettings, config: Static<S>): Created<Component>
}

export type Factory =
  | ReceiverFactory<any>
  | ProcessorFactory<any>
  | ExporterFactory<any>
  | ConnectorFactory<any>
  | ExtensionFactory<any>

/** `type` or `type/name` → the type part. */
export function componentType(id: string): string {
  const i = id.indexOf('/')
  return i === -1 ? id : id.slice(0, i)
}

/** Pipeline id `signal` or `signal/name` → the signal part. */
export function pipelineSignal(id: string): string {
  return componentType(id)
}

/**
 * A factory without `create`: kind, type, schema and `check`, what reading a config needs. Each
 * component's `descriptor.ts` holds it, apart from the implementation (`index.ts`, whose factory
 * spreads it), so the config commands load no server, client or store.
 */
export type Descriptor<F extends Factory> = Omit<F, 'create'>

/** The factory of `descriptor` whose `create` loads the implementation's factory (`import()`) first. */
export function lazyFactory<F extends Factory>(descriptor: Descriptor<F>, load: () => Promise<F>): F {
  let loaded: Promise<F> | undefined
  const factory = () => (loaded ??= load())
  const create = async (...args: unknown[]): Promise<unknown> => ((await factory()).create as (...a: unknown[]) => unknown)(...args)
  return { ...descriptor, load: factory, create } as unknown as F
}
