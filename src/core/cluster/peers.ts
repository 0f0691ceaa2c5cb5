import { readdirSync, rmSync } from 'node:fs'
import { createServer, connect, type Server, type Socket } from 'node:net'
import { join } from 'node:path'

/**
 * Direct channels between the workers of one daemon (issue 19 §1). Each worker listens on a Unix
 * socket `<index>.sock` in a directory its supervisor made for this run (mode 0700), and a worker
 * that starts connects to every other worker already listening there. One connection then carries
 * messages both ways, so what one worker publishes reaches the others in one hop, written once,
 * instead of being parsed and written out again by the supervisor on the way (which cost as much
 * CPU as the two workers' ends together).
 *
 * A starting worker's `open()` resolves once every peer it reached has said it will send to it
 * (HELLO → ACK). Whatever a worker publishes after that reaches the newcomer; what it published
 * before is already in the store the newcomer reads at start (analytics, registries). Of two
 * workers starting together, the one that lists the directory last finds the other listening:
 * each listens before it lists.
 *
 * A connection can end while the worker at its other end lives on: one of the two dropped it
 * for not reading (see `send`). The higher index of the two, once it has seen its last
 * connection with the other end, tries to join it again, with REJOIN instead of HELLO, naming the
 * process it lost (a dead peer's socket refuses, and its replacement is not that process); the joiner answers ACK with READY, and each end, once it knows the
 * other sends to it again (the joiner at ACK, the other at READY), is told (`rejoined`). What was
 * sent in between is lost: a receiver that needs every message (the analytics) reads the store
 * again then. A peer is told apart from its replacement by a random number it sends with HELLO
 * and ACK: joining a replacement is no rejoin.
 *
 * Frames: u32 LE length of what follows, a type byte, then the type's payload —
 * HELLO, ACK and READY: the sender's index (u16 LE) and its random number (u32 LE); REJOIN: the
 * same and the random number of the process it joins again (u32 LE); MESSAGE: topic length (u16 LE), the topic, a kind byte (0: JSON text, 1: a string as it is, 2:
 * bytes as they are) and the data.
 */
export class PeerMesh {
  /** The one connection each peer's messages are sent on (the latest made with it). */
  private readonly links = new Map<number, Socket>()
  private readonly sockets = new Set<Socket>()
  /** How many open connections each known peer has: its end is when the last one closes. */
  private readonly connections = new Map<number, number>()
  /** Each open connection's peer process (its random number), and whether it was opened by REJOIN. */
  private readonly ends = new Map<Socket, { peer: number; nonce: number; rejoin: boolean }>()
  /** Peers this worker is joining again, with the random number of the process it lost. */
  private readonly rejoining = new Map<number, number>()
  /** This process's random number: a replacement of a peer has another. */
  private readonly nonce = (Math.random() * 0xffffffff) >>> 0
  private server?: Server
  private closed = false

  constructor(
    private readonly dir: string,
    private readonly index: number,
    private readonly deliver: (topic: string, data: unknown) => void,
    private readonly warn: (message: string, err?: unknown) => void = () => undefined,
    private readonly gone: (peer: number) => void = () => undefined,
    /**
     * Called once a peer whose connections were lost while it lived on (dropped, by either end)
     * sends to this worker and is sent to again: what either sent between has not arrived.
     */
    private readonly rejoined: (peer: number) => void = () => undefined,
  ) {}

  /** How many peers this worker sends to now. */
  get peers(): number {
    return this.links.size
  }

  /** Listens, then joins every peer listening; resolves when each has acknowledged (or `ackTimeoutMs` passed). */
  async open(ackTimeoutMs = 10_000): Promise<void> {
    const path = socketPath(this.dir, this.index)
    // The socket of this index's previous worker, if it died.
    rmSync(path, { force: true })
    const server = (this.server = createServer((s) => this.adopt(s)))
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(path, () => {
        server.off('error', reject)
        resolve()
      })
    })
    server.on('error', (err) => this.warn('the socket for the other workers failed', err))
    const others = readdirSync(this.dir)
      .map((f) => /^(\d+)\.sock$/.exec(f))
      .filter((m): m is RegExpExecArray => m !== null && Number(m[1]) !== this.index)
      .map((m) => Number(m[1]))
    await Promise.all(others.map((peer) => this.join(peer, ackTimeoutMs)))
  }

  /** Sends to every peer; the data is encoded once. */
  send(topic: string, data: unknown): void {
    if (this.links.size === 0) return
    const frame = messageFrame(topic, data)
    for (const [peer, s] of this.links) {
      // A peer that has stopped reading (stopped, or hung) is dropped rather than buffered for without bound.
      if (s.writableLength > MAX_BUFFERED) {
        this.warn(`worker ${peer} does not read what is sent to it; dropping the connection (the higher index of the two joins again once it reads)`)
        this.links.delete(peer)
        // Every connection with it: a second one (both joined at once) would be no better read.
        for (const [other, e] of this.ends) if (e.peer === peer) other.destroy()
        s.destroy()
        continue
      }
      s.write(frame)
    }
  }

  close(): void {
    this.closed = true
    for (const s of this.sockets) s.destroy()
    this.server?.close()
    rmSync(socketPath(this.dir, this.index), { force: true })
  }

  /**
   * Connects to `peer`, says who this is and waits for its ACK (a peer that is gone is skipped).
   * Without `ackTimeoutMs` (joining again) it waits as long as the peer lives: a peer that stopped
   * reading answers once it reads again.
   */
  private join(peer: number, ackTimeoutMs?: number, lost?: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const s = connect(socketPath(this.dir, peer))
      const timer =
        ackTimeoutMs === undefined
          ? undefined
          : setTimeout(() => {
              this.warn(`worker ${peer} did not acknowledge within ${ackTimeoutMs} ms; its messages may miss this worker`)
              resolve()
            }, ackTimeoutMs)
      timer?.unref()
      const done = () => {
        clearTimeout(timer)
        resolve()
      }
      // ECONNREFUSED: a socket left by a worker that died; its replacement will join this one.
      s.once('error', done)
      s.once('close', done)
      s.once('connect', () => {
        this.adopt(s, (acked) => {
          if (acked === peer) done()
        })
        s.write(controlFrame(lost === undefined ? HELLO : REJOIN, this.index, this.nonce, lost))
      })
    })
  }

  /** Reads `s`'s frames; `onAck` hears ACKs (a joining connection). */
  private adopt(s: Socket, onAck?: (peer: number) => void): void {
    if (this.closed) return void s.destroy()
    this.sockets.add(s)
    let peer = -1
    // The bytes of an unfinished frame, joined only once all of it is here (a large message
    // arrives in many reads; joining at each read would copy it over and over).
    let parts: Buffer[] = []
    let have = 0
    let want = 0
    s.on('data', (chunk: Buffer) => {
      if (have > 0) {
        parts.push(chunk)
        have += chunk.length
        if (want === 0 && have >= 4) want = 4 + Buffer.concat(parts).readUInt32LE(0)
        if (want === 0 || have < want) return
      }
      const buf = have > 0 ? Buffer.concat(parts, have) : chunk
      parts = []
      have = 0
      want = 0
      let at = 0
      while (buf.length - at >= 4) {
        const size = buf.readUInt32LE(at)
        if (buf.length - at - 4 < size) break
        const type = buf[at + 4]
        const end = at + 4 + size
        if (type === MESSAGE) this.receive(buf, at + 5, end)
        else if (type === HELLO || type === REJOIN || type === ACK) {
          if (peer < 0) {
            peer = buf.readUInt16LE(at + 5)
            const nonce = buf.readUInt32LE(at + 7)
            this.connections.set(peer, (this.connections.get(peer) ?? 0) + 1)
            this.ends.set(s, { peer, nonce, rejoin: type === REJOIN && buf.readUInt32LE(at + 11) === this.nonce })
          }
          this.links.set(peer, s)
          if (type !== ACK) s.write(controlFrame(ACK, this.index, this.nonce))
          else {
            // The peer sends on this connection since the HELLO; now this end does too.
            s.write(controlFrame(READY, this.index, this.nonce))
            const lost = this.rejoining.get(peer)
            this.rejoining.delete(peer)
            onAck?.(peer)
            if (lost === this.ends.get(s)?.nonce) this.rejoined(peer)
          }
        } else if (type === READY && this.ends.get(s)?.rejoin) this.rejoined(peer)
        at = end
      }
      if (at < buf.length) {
        const rest = buf.subarray(at)
        parts = [rest]
        have = rest.length
        want = have >= 4 ? 4 + rest.readUInt32LE(0) : 0
      }
    })
    s.on('error', () => undefined)
    s.on('close', () => {
      this.sockets.delete(s)
      const end = this.ends.get(s)
      this.ends.delete(s)
      if (peer < 0 || !end) return
      if (this.links.get(peer) === s) {
        this.links.delete(peer)
        // Another connection with it (both joined at once) carries on.
        for (const [other, e] of this.ends) if (e.peer === peer && !other.destroyed) this.links.set(peer, other)
      }
      // Every frame read from this connection has been delivered by now ('data' comes before 'close').
      const left = (this.connections.get(peer) ?? 1) - 1
      if (left > 0) this.connections.set(peer, left)
      else this.connections.delete(peer)
      if (this.closed) return
      if (left === 0) this.gone(peer)
      this.rejoin(peer, end.nonce)
    })
  }

  /**
   * A connection with `peer` (the process of `nonce`) ended: it died, or it or this worker dropped
   * the connection. Once no other connection with that process is open (nor being made again),
   * the higher index of the two joins it again: a dead peer's socket refuses, and a replacement
   * answers with another number.
   */
  private rejoin(peer: number, nonce: number): void {
    if (this.index < peer || this.rejoining.has(peer)) return
    for (const [other, e] of this.ends) if (e.peer === peer && e.nonce === nonce && !other.destroyed) return
    this.rejoining.set(peer, nonce)
    void this.join(peer, undefined, nonce).then(() => {
      // Refused (it died), or answered: either way not joining any more.
      if (this.rejoining.get(peer) === nonce) this.rejoining.delete(peer)
    })
  }

  private receive(buf: Buffer, from: number, end: number): void {
    const topicLength = buf.readUInt16LE(from)
    const topic = buf.toString('utf8', from + 2, from + 2 + topicLength)
    const kind = buf[from + 2 + topicLength]
    let data: unknown
    try {
      if (kind === BYTES) data = buf.subarray(from + 3 + topicLength, end)
      else {
        const text = buf.toString('utf8', from + 3 + topicLength, end)
        data = kind === STRING ? text : JSON.parse(text)
      }
    } catch (err) {
      return this.warn(`a message on "${topic}" from another worker could not be read`, err)
    }
    this.deliver(topic, data)
  }
}

const HELLO = 1
const ACK = 2
const MESSAGE = 3
const READY = 4
const REJOIN = 5
const JSON_TEXT = 0
const STRING = 1
const BYTES = 2
/** What may wait unread for one peer: far beyond what it gets in a second, so only a peer that stopped reading reaches it. */
const MAX_BUFFERED = 64 << 20

export const socketPath = (dir: string, index: number): string => join(dir, `${index}.sock`)

function controlFrame(type: number, index: number, nonce: number, target?: number): Buffer {
  const b = Buffer.allocUnsafe(target === undefined ? 11 : 15)
  b.writeUInt32LE(b.length - 4, 0)
  b[4] = type
  b.writeUInt16LE(index, 5)
  b.writeUInt32LE(nonce, 7)
  if (target !== undefined) b.writeUInt32LE(target, 11)
  return b
}

function messageFrame(topic: string, data: unknown): Buffer {
  const kind = data instanceof Uint8Array ? BYTES : typeof data === 'string' ? STRING : JSON_TEXT
  const body = kind === BYTES ? (data as Uint8Array) : undefined
  const text = kind === STRING ? (data as string) : kind === JSON_TEXT ? JSON.stringify(data ?? null) : ''
  const topicLength = Buffer.byteLength(topic)
  const size = 1 + 2 + topicLength + 1 + (body ? body.byteLength : Buffer.byteLength(text))
  const b = Buffer.allocUnsafe(4 + size)
  b.writeUInt32LE(size, 0)
  b[4] = MESSAGE
  b.writeUInt16LE(topicLength, 5)
  b.write(topic, 7)
  b[7 + topicLength] = kind
  if (body) b.set(body, 8 + topicLength)
  else b.write(text, 8 + topicLength)
  return b
}
