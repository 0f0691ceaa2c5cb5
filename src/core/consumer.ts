import type { Caller, UsageRecord } from '../model/usage-record.js'
import type { StoredResponse } from '../ports/dedup.js'
import type { UnitCarrier, WriteUnit, WriteUnits } from '../ports/write-unit.js'
import type { Copies } from './copies.js'

export type Signal = 'usage' | 'traces' | 'logs' | 'metrics'
export const SIGNALS: readonly Signal[] = ['usage', 'traces', 'logs', 'metrics']

/** Facts about the request a batch came in on, travelling with the batch. */
export interface BatchContext extends UnitCarrier {
  caller?: Caller
  /**
   * Idempotency-Key replay data, stored by the durable exporter in the records' transaction. The
   * response is rendered there, once the store knows which records it found already stored.
   */
  idempotency?: { key: string; bodyHash: string; response: (duplicates: ReadonlyMap<string, string>) => StoredResponse }
  /**
   * Records the durable exporter found already stored under their transactionId (stored by
   * another process after the receiver's check): record id → the id that was kept. The
   * receiver answers with the kept id, so a 201 never carries an id that was not stored.
   */
  duplicates?: ReadonlyMap<string, string>
  receiver?: string
  /** How long the receiver dedups transactionIds; the store skips a record already stored within it. */
  dedupWindowMs?: number
  /** The request's one LMDB write transaction, shared by the components that store for it (see unitOf). */
  unit?: WriteUnit
  /**
   * Items a connector refused one by one while the rest of the batch went on (OTLP partial
   * success): the receiver reports them to the client beside its own decoding rejections.
   */
  rejected?: ItemRejection[]
  /**
   * Set when the receiver handed over only the items its consumer reads (Consumer.spanInterest):
   * `count` items were in the request, and batch item i was item `positions[i]` of them. The
   * indexes in `rejected`, and a consumer's "every item refused", refer to those.
   */
  filtered?: { count: number; positions: readonly number[] }
  /**
   * Set when a fan-out sent copies of some items down several pipelines: a component those
   * pipelines share takes each item once (takeOnce, src/host/fanout.ts). Absent otherwise.
   */
  copies?: Copies
}

/** An item refused alone: its index in the batch the refusing component received, and why. */
export interface ItemRejection {
  index: number
  message: string
}

/** The batch's write unit, created by the first component that writes. */
export function unitOf(batch: Batch<any>, store: WriteUnits): WriteUnit {
  return (batch.ctx.unit ??= store.unit())
}

export interface Batch<T = UsageRecord> {
  items: T[]
  ctx: BatchContext
}

/**
 * One tiny interface, after the Collector's consumer package: the call resolves when the
 * batch is handled (for exporters: durably), and rejects with a ConsumerError otherwise.
 * After the call the batch belongs to the callee.
 */
export interface Consumer<T = UsageRecord> {
  consume(batch: Batch<T>): Promise<void>
  /** A traces consumer that reads only some spans says which; absent: it reads every span. */
  readonly spanInterest?: SpanInterest
}

/**
 * The spans a traces consumer reads: those carrying, on the span or on its resource, an
 * attribute whose key starts with one of `attributePrefixes`. It passes every other span over
 * without effect (no output, no refusal), so a receiver may leave those undecoded and hand over
 * the rest with BatchContext.filtered.
 */
export interface SpanInterest {
  attributePrefixes: readonly string[]
}

export interface ConsumerCapabilities {
  /** The consumer changes the batch in place; a fan-out must hand it a copy. */
  mutatesData: boolean
}
