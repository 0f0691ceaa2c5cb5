/**
 * What is being stored right now in this process: Idempotency-Keys and transactionIds of
 * requests not yet answered. One set of tables per store, shared by every receiver of the
 * process (REST, OTLP over HTTP and gRPC), so a retry that arrives on another transport while
 * the first attempt is in flight waits for it instead of storing a twin. Other processes on the
 * same data directory are caught by the store itself, inside the commit.
 */
export class InFlight {
  /** team \0 Idempotency-Key → the body hash of the request holding it. */
  readonly keys = new Map<string, string>()
  /** team \0 kind \0 transactionId → the id the record was stored under, once durable. */
  readonly records = new Map<string, Pending>()
}

/**
 * The outcome of a record in flight: the id it was stored under, or why it was not. Its promise
 * is made only when a concurrent request waits for it, which is rare: the usual request pays
 * for no promise, no handlers and no microtask here.
 */
export class Pending {
  private promise?: Promise<string>
  private settle?: { resolve(id: string): void; reject(err: unknown): void }
  /** 0 in flight, 1 stored (`id`), 2 failed (`err`). */
  private state: 0 | 1 | 2 = 0
  private id = ''
  private err: unknown

  /** Resolves with the id the record was stored under; rejects when it was not stored. */
  wait(): Promise<string> {
    if (this.promise) return this.promise
    if (this.state === 1) return (this.promise = Promise.resolve(this.id))
    if (this.state === 2) return (this.promise = Promise.reject(this.err))
    return (this.promise = new Promise<string>((resolve, reject) => (this.settle = { resolve, reject })))
  }

  resolve(id: string): void {
    if (this.state !== 0) return
    this.state = 1
    this.id = id
    this.settle?.resolve(id)
  }

  reject(err: unknown): void {
    if (this.state !== 0) return
    this.state = 2
    this.err = err
    this.settle?.reject(err)
  }
}

const tables = new WeakMap<object, InFlight>()

/** The in-flight tables of a store. */
export function inFlightFor(store: object): InFlight {
  let t = tables.get(store)
  if (!t) tables.set(store, (t = new InFlight()))
  return t
}
