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
 * Frames: u32 LE length of what follows, a type byte, then the type's payload —
 * HELLO and ACK: the sender's index (u16 LE); MESSAGE: topic length (u16 LE), the topic, a kind
 * byte (0: JSON text, 1: a string as it is, 2: bytes as they are) and the data.
 */
export class PeerMesh {
  /** The one connection each peer's messages are sent on (the latest made with it). */
  private readonly links = new Map<number, Socket>()
  private readonly sockets = new Set<Socket>()
  /** How many open connections each known peer has: its end is when the last one closes. */
  private readonly connections = new Map<number, number>()
  private server?: Server
  private closed = false

  constructor(
    private readonly dir: string,
    private readonly index: number,
    private readonly deliver: (topic: string, data: unknown) => void,
    private readonly warn: (message: string, err?: unknown) => void = () => undefined,
    private readonly gone: (peer: number) => void = () => undefined,
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
        this.warn(`worker ${peer} does not read what is sent to it; dropping the connection`)
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

  /** Connects to `peer`, says who this is and waits for its ACK (a peer that is gone is skipped). */
  private join(peer: number, ackTimeoutMs: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const s = connect(socketPath(this.dir, peer))
      const timer = setTimeout(() => {
        this.warn(`worker ${peer} did not acknowledge within ${ackTimeoutMs} ms; its messages may miss this worker`)
        resolve()
      }, ackTimeoutMs)
      timer.unref()
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
        s.write(controlFrame(HELLO, this.index))
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
        else if (type === HELLO || type === ACK) {
          if (peer < 0) {
            peer = buf.readUInt16LE(at + 5)
            this.connections.set(peer, (this.connections.get(peer) ?? 0) + 1)
          }
          this.links.set(peer, s)
          if (type === HELLO) s.write(controlFrame(ACK, this.index))
          else onAck?.(peer)
        }
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
      if (peer < 0) return
      if (this.links.get(peer) === s) this.links.delete(peer)
      // Every frame read from this connection has been delivered by now ('data' comes before 'close').
      const left = (this.connections.get(peer) ?? 1) - 1
      if (left > 0) return void this.connections.set(peer, left)
      this.connections.delete(peer)
      if (!this.closed) this.gone(peer)
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
const JSON_TEXT = 0
const STRING = 1
const BYTES = 2
/** What may wait unread for one peer: far beyond what it gets in a second, so only a peer that stopped reading reaches it. */
const MAX_BUFFERED = 64 << 20

export const socketPath = (dir: string, index: number): string => join(dir, `${index}.sock`)

function controlFrame(type: number, index: number): Buffer {
  const b = Buffer.allocUnsafe(7)
  b.writeUInt32LE(3, 0)
  b[4] = type
  b.writeUInt16LE(index, 5)
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
