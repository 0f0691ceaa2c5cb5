import { isClusterMessage, type ClusterBus, type ClusterMessage } from './bus.js'
import { PeerMesh } from './peers.js'

/** What a request waits on: its callbacks, and the tick it was sent at (none when the caller set its own timeout). */
interface Pending {
  resolve(v: unknown): void
  reject(e: Error): void
  timer?: NodeJS.Timeout
  tick?: number
}

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
  private readonly rejoined = new Set<(peer: number) => void>()
  private readonly pending = new Map<number, Pending>()
  private nextId = 1
  /**
   * Seconds of this worker's own loop, counted by a timer: bounds are counted in these, so a
   * stall of the worker (GC, valgrind) that stops its timers does not count as the supervisor's.
   */
  private tick = 0
  /** Ticks since the supervisor last answered anything (a reply resets it). */
  private silent = 0
  /** When the supervisor last answered (ms since the epoch): read on a reply, not on a tick, which can be late. */
  private heardAt = Date.now()
  private pinging = false
  private readonly ticker: NodeJS.Timeout

  constructor(
    readonly workers: number,
    readonly index: number,
    private readonly proc: NodeJS.Process = process,
    peerDir: string,
    private readonly warn: (message: string, err?: unknown) => void = () => undefined,
    /** How long the supervisor may leave a request unanswered, and say nothing at all, in seconds. */
    readonly supervisorTimeoutSeconds: number,
  ) {
    this.leader = index === 0
    this.mesh = new PeerMesh(
      peerDir,
      index,
      (topic, data) => this.deliver(topic, data),
      warn,
      (peer) => this.tell(this.gone, peer, 'the end'),
      (peer) => this.tell(this.rejoined, peer, 'the return'),
    )
    proc.on('message', (m: unknown) => {
      if (isClusterMessage(m)) this.receive(m)
    })
    // The channel is reliable and ordered: when the supervisor is gone it closes, and what waits
    // on it fails at once, not after the bound.
    proc.on('disconnect', () => {
      clearInterval(this.ticker)
      for (const [id, p] of this.pending) {
        this.pending.delete(id)
        clearTimeout(p.timer)
        p.reject(new Error('the supervisor is gone (the channel to it closed)'))
      }
    })
    // A message sent as the supervisor dies, before 'disconnect' is seen, fails (EPIPE) with an
    // 'error' on the process, which unheard would end this worker mid-drain; 'disconnect' follows.
    proc.on('error', (err) => warn('a message to the supervisor could not be sent', err))
    // A supervisor alive but stuck (stopped, in an endless loop) keeps the channel open: what
    // waits on it is bounded by the ticks instead, and a ping every second tells /healthz.
    this.ticker = setInterval(() => this.onTick(), 1000)
    this.ticker.unref()
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
   * Waits for the answer while the supervisor is connected, up to `supervisorTimeoutSeconds` of
   * this worker's ticks (or the caller's `timeoutMs`). The bound is generous and counted in ticks
   * of this worker's own loop because a worker's clock cannot tell a slow supervisor from its own
   * stalls: under valgrind a worker's loop stopped for 2.8 s while its lease request was answered
   * in 6 ms, and the 2 s timeout it then had fired before the answer, long there, was read (the
   * 503s of issue 19 §1). Ticks stop with the loop; and each bound re-checks after a
   * setImmediate, so an answer that arrived meanwhile is read first.
   */
  request<T>(topic: string, data: unknown, timeoutMs?: number): Promise<T> {
    const id = this.nextId++
    return new Promise<T>((resolve, reject) => {
      const p: Pending = { resolve: resolve as (v: unknown) => void, reject }
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
      } else {
        // No timer of its own: onTick gives up on it after the bound (no cost per request).
        p.tick = this.tick
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

  onPeerRejoined(fn: (peer: number) => void): () => void {
    this.rejoined.add(fn)
    return () => void this.rejoined.delete(fn)
  }

  /**
   * Since when (ms since the epoch: its last answer) the supervisor has answered nothing, not even
   * this worker's ping every second, once that has lasted `supervisorTimeoutSeconds`; undefined
   * while it answers. /healthz fails on it, so that a stuck supervisor gets the daemon restarted.
   */
  unresponsiveSince(): number | undefined {
    return this.silent > this.supervisorTimeoutSeconds ? this.heardAt : undefined
  }

  /** Every second: gives up on requests past the bound, and pings the supervisor if the last ping was answered. */
  private onTick(): void {
    this.tick++
    this.silent++
    const expired: number[] = []
    for (const [id, p] of this.pending) if (p.tick !== undefined && this.tick - p.tick > this.supervisorTimeoutSeconds) expired.push(id)
    if (expired.length) {
      // As with a timeout: an answer already in the pipe is read first (timers run before I/O).
      setImmediate(() => {
        for (const id of expired) {
          const p = this.pending.get(id)
          if (!p) continue
          this.pending.delete(id)
          p.reject(new Error(`the supervisor did not answer within ${this.supervisorTimeoutSeconds} s (it is alive but stuck, or overloaded)`))
        }
      })
    }
    if (!this.pinging) {
      this.pinging = true
      const done = () => (this.pinging = false)
      this.request('ping', null).then(done, done)
    }
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
      // Any answer, even one given up on, shows the supervisor is answering.
      this.silent = 0
      this.heardAt = Date.now()
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

  private tell(listeners: Set<(peer: number) => void>, peer: number, what: string): void {
    for (const fn of listeners) {
      try {
        fn(peer)
      } catch (err) {
        this.warn(`${what} of worker ${peer} could not be handled`, err)
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
