import { isClusterMessage, type ClusterBus, type ClusterMessage } from './bus.js'
import { PeerMesh } from './peers.js'

/**
 * A worker's side of the bus: requests to the supervisor over the IPC channel node:cluster opens
 * to it, and what it publishes straight to the other workers over sockets in the directory the
 * supervisor made for them (peers.ts). A message may be bytes (a Uint8Array arrives as a Buffer).
 */
export class WorkerBus implements ClusterBus {
  readonly leader: boolean
  private readonly mesh: PeerMesh
  private readonly topics = new Map<string, Set<(data: unknown) => void>>()
  private readonly answers = new Map<string, (data: unknown) => unknown>()
  private readonly gone = new Set<(peer: number) => void>()
  private readonly pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void; timer?: NodeJS.Timeout }>()
  private nextId = 1

  constructor(
    readonly workers: number,
    readonly index: number,
    private readonly proc: NodeJS.Process = process,
    peerDir: string,
    private readonly warn: (message: string, err?: unknown) => void = () => undefined,
  ) {
    this.leader = index === 0
    this.mesh = new PeerMesh(peerDir, index, (topic, data) => this.deliver(topic, data), warn, (peer) => this.peerGone(peer))
    proc.on('message', (m: unknown) => {
      if (isClusterMessage(m)) this.receive(m)
    })
    // The channel is reliable and ordered: a request goes unanswered only when the supervisor is
    // gone, and then the channel closes. What waits on it fails at once, not after a timeout.
    proc.on('disconnect', () => {
      for (const [id, p] of this.pending) {
        this.pending.delete(id)
        clearTimeout(p.timer)
        p.reject(new Error('the supervisor is gone (the channel to it closed)'))
      }
    })
  }

  /** Joins the other workers (before this worker stores anything, so none of its messages miss a peer that is up). */
  async open(): Promise<void> {
    await this.mesh.open()
  }

  publish(topic: string, data: unknown): void {
    this.mesh.send(topic, data)
  }

  subscribe(topic: string, fn: (data: unknown) => void): () => void {
    let set = this.topics.get(topic)
    if (!set) this.topics.set(topic, (set = new Set()))
    set.add(fn)
    return () => void set.delete(fn)
  }

  /**
   * Waits for the answer as long as the supervisor is connected: no timeout unless the caller
   * sets one. A worker's clock cannot tell a slow supervisor from its own stalls: under valgrind a
   * worker's loop stopped for 2.8 s while its lease request was answered in 6 ms, and the 2 s
   * timeout it then had fired before the answer, long there, was read (the 503s of issue 19 §1).
   */
  request<T>(topic: string, data: unknown, timeoutMs?: number): Promise<T> {
    const id = this.nextId++
    return new Promise<T>((resolve, reject) => {
      const p: { resolve(v: unknown): void; reject(e: Error): void; timer?: NodeJS.Timeout } = { resolve: resolve as (v: unknown) => void, reject }
      if (timeoutMs !== undefined) {
        p.timer = setTimeout(() => {
          // Timers run before I/O in a turn of the loop: after a stall of this worker's own, let
          // it read an answer that arrived meanwhile before giving up on it.
          setImmediate(() => {
            if (this.pending.get(id) !== p) return
            this.pending.delete(id)
            reject(new Error(`the supervisor did not answer "${topic}" within ${timeoutMs} ms`))
          })
        }, timeoutMs)
        p.timer.unref()
      }
      this.pending.set(id, p)
      if (!this.send({ meterd: 'request', id, topic, data })) {
        clearTimeout(p.timer)
        this.pending.delete(id)
        reject(new Error('the supervisor is gone (the channel to it is closed)'))
      }
    })
  }

  onPeerGone(fn: (peer: number) => void): () => void {
    this.gone.add(fn)
    return () => void this.gone.delete(fn)
  }

  answer(topic: string, fn: (data: unknown) => unknown): void {
    this.answers.set(topic, fn)
  }

  /** Tells the supervisor this worker listens and is ready. */
  ready(): void {
    this.send({ meterd: 'ready', index: this.index })
  }

  private send(m: ClusterMessage): boolean {
    if (!this.proc.send || !this.proc.connected) return false
    this.proc.send(m)
    return true
  }

  private receive(m: ClusterMessage): void {
    if (m.meterd === 'request') {
      void this.reply(m.id, m.topic, m.data)
    } else if (m.meterd === 'publish') {
      this.deliver(m.topic, m.data)
    } else if (m.meterd === 'reply') {
      const p = this.pending.get(m.id)
      if (!p) return
      this.pending.delete(m.id)
      clearTimeout(p.timer)
      if (m.error !== undefined) p.reject(new Error(m.error))
      else p.resolve(m.data)
    }
  }

  private deliver(topic: string, data: unknown): void {
    for (const fn of this.topics.get(topic) ?? []) {
      try {
        fn(data)
      } catch (err) {
        this.warn(`a message on "${topic}" from another worker could not be handled`, err)
      }
    }
  }

  private peerGone(peer: number): void {
    for (const fn of this.gone) {
      try {
        fn(peer)
      } catch (err) {
        this.warn(`the end of worker ${peer} could not be handled`, err)
      }
    }
  }

  private async reply(id: number, topic: string, data: unknown): Promise<void> {
    const fn = this.answers.get(topic)
    try {
      if (!fn) throw new Error(`worker ${this.index} has no answer for "${topic}"`)
      this.send({ meterd: 'reply', id, data: await fn(data) })
    } catch (err) {
      this.send({ meterd: 'reply', id, error: (err as Error).message })
    }
  }
}
