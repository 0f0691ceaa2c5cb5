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
  readonly records = new Map<string, Promise<string>>()
}

const tables = new WeakMap<object, InFlight>()

/** The in-flight tables of a store. */
export function inFlightFor(store: object): InFlight {
  let t = tables.get(store)
  if (!t) tables.set(store, (t = new InFlight()))
  return t
}
