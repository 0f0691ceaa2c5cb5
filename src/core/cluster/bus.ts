/**
 * How the processes of one machine talk (issue 19 §1): a daemon started with `server.workers: N`
 * runs N workers behind one supervisor, all serving the same listeners over the one LMDB
 * environment. What must stay exact across them goes through this bus:
 *
 * - `publish`/`subscribe`: a fire-and-forget message to every *other* worker (registry and key
 *   changes, the analytics rows of newly stored records, kicks for the webhook queue);
 * - `request`: a question the supervisor answers (rate-limit leases, aggregated metrics);
 *   the supervisor asks workers the same way (`answer`: each worker's own metrics).
 *
 * A single process uses LOCAL: no peers, so publishing does nothing and nothing is asked.
 */
export interface ClusterBus {
  /** How many workers serve this daemon (1 when not clustered). */
  readonly workers: number
  /** This worker's index, 0-based. */
  readonly index: number
  /** True for the one worker that runs machine-wide background jobs (worker 0). */
  readonly leader: boolean
  /** Sends to every other worker; delivery is in order per sender. */
  publish(topic: string, data: unknown): void
  /** Calls `fn` for every message another worker publishes on `topic`; returns an unsubscribe. */
  subscribe(topic: string, fn: (data: unknown) => void): () => void
  /**
   * Asks the supervisor; rejects when there is none or the channel to it closes, and when it does
   * not answer within `timeoutMs`, or by default `server.supervisor_timeout_seconds` (see
   * WorkerBus.request).
   */
  request<T = unknown>(topic: string, data: unknown, timeoutMs?: number): Promise<T>
  /**
   * Since when (ms since the epoch) the supervisor has answered nothing, once that has lasted
   * `server.supervisor_timeout_seconds` (a supervisor alive but stuck); undefined otherwise, and
   * always for a single process.
   */
  unresponsiveSince(): number | undefined
  /** Answers the supervisor's requests on `topic` (a worker's part of a machine-wide figure). */
  answer(topic: string, fn: (data: unknown) => unknown): void
  /**
   * Calls `fn` with a worker's index once every connection with it has closed: it died (or this
   * worker was dropped for not reading). What it published before has been delivered by then.
   */
  onPeerGone(fn: (peer: number) => void): () => void
  /**
   * Calls `fn` with a worker's index once it sends to this worker and is sent to again after a
   * connection with it ended while it lived on (one of the two dropped it for not reading): what
   * either published in between was not delivered.
   */
  onPeerRejoined(fn: (peer: number) => void): () => void
}

export const LOCAL: ClusterBus = {
  workers: 1,
  index: 0,
  leader: true,
  publish: () => undefined,
  subscribe: () => () => undefined,
  request: () => Promise.reject(new Error('not running as a worker: there is no supervisor to ask')),
  unresponsiveSince: () => undefined,
  answer: () => undefined,
  onPeerGone: () => () => undefined,
  onPeerRejoined: () => () => undefined,
}

/**
 * The wire format between a worker and its supervisor (Node IPC, serialized as JSON): `request`
 * and `reply` go both ways; `publish` only from the supervisor (workers publish to each other
 * directly, peers.ts).
 */
export type ClusterMessage =
  | { meterd: 'publish'; topic: string; data: unknown; from: number }
  | { meterd: 'request'; id: number; topic: string; data: unknown }
  | { meterd: 'reply'; id: number; data?: unknown; error?: string }
  | { meterd: 'ready'; index: number }

export function isClusterMessage(m: unknown): m is ClusterMessage {
  return typeof m === 'object' && m !== null && typeof (m as { meterd?: unknown }).meterd === 'string'
}

/**
 * Keeps a per-process cache in step across workers: every change `source` commits is published
 * on `topic`, and a change published by another worker runs `reload` here. The message goes out
 * after the change is durable, and LMDB shows it to the next read in every process, so a
 * worker's view is at most one IPC hop (well under 10 ms) behind.
 */
export function shareChanges(bus: ClusterBus, topic: string, source: { onChange?: () => void }, reload: () => void): void {
  if (bus.workers <= 1) return
  source.onChange = () => bus.publish(topic, null)
  bus.subscribe(topic, reload)
}
