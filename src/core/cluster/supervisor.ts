import cluster, { type Worker } from 'node:cluster'
import { mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { availableParallelism, tmpdir } from 'node:os'
import { createConnection } from 'node:net'
import { join } from 'node:path'
import type { Logger } from 'pino'
import { AggregatorRegistry } from 'prom-client'
import { isClusterMessage, type ClusterMessage } from './bus.js'
import { cgroupCpuQuota } from './cpus.js'

/**
 * `server.workers`: `auto` is one worker per core (at least 1), no more than the cgroup's CPU quota
 * rounded up (a container's CPU limit), capped at 64. `quota` is for tests.
 */
export function workerCount(setting: 'auto' | number, quota: number | undefined = cgroupCpuQuota()): number {
  if (setting === 'auto') return Math.max(1, Math.min(64, availableParallelism(), Math.ceil(quota ?? Infinity)))
  return setting
}

/** What the supervisor answers for its workers: one handler per request topic. */
export type Answer = (data: any, from: Worker) => unknown | Promise<unknown>

export interface SuperviseOptions {
  workers: number
  logger: Logger
  /** How long SIGTERM waits for the workers to drain before killing them. */
  shutdownTimeoutMs: number
  /** Request handlers (rate-limit leases, ...), by topic. */
  answers?: Record<string, Answer>
  /** Called once when every worker has reported ready the first time. */
  onReady?: () => void
}

const RESTART_WINDOW_MS = 60_000
const MAX_RESTARTS_PER_WINDOW = 10

/**
 * The primary process of a clustered daemon (node:cluster): forks the workers (the leader
 * first, the rest once it is ready), gives them a directory for the sockets they publish to each
 * other on (peers.ts), answers their requests, restarts a worker that dies, and on
 * SIGTERM/SIGINT/SIGHUP drains them all. A worker that fails before it was ever ready stops the
 * daemon (a bad config or a busy port would only crash-loop); so does a crash loop.
 * Resolves with the exit code.
 */
export function supervise(opts: SuperviseOptions): Promise<number> {
  const { logger } = opts
  const byIndex = new Map<number, Worker>()
  const everReady = new Set<number>()
  /** The workers that said they are ready and have not exited since: the ones that can answer. */
  const ready = new Set<Worker>()
  const asked = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>()
  let nextId = 1

  /** Asks one worker; rejects when it does not answer within `timeoutMs` or exits first. */
  const ask = (w: Worker, topic: string, timeoutMs: number): Promise<unknown> =>
    new Promise((resolve, reject) => {
      const id = nextId++
      // Timers run before I/O in a turn of the loop: after a stall of the supervisor's own, an
      // answer that arrived meanwhile is read first (as the workers' requests do, worker-bus.ts).
      const timer = setTimeout(
        () =>
          setImmediate(() => {
            if (!asked.has(id)) return
            asked.delete(id)
            reject(new Error(`worker ${w.id} did not answer "${topic}" within ${timeoutMs} ms`))
          }),
        timeoutMs,
      )
      timer.unref()
      const settle = (fn: () => void) => {
        clearTimeout(timer)
        asked.delete(id)
        fn()
      }
      asked.set(id, { resolve: (v) => settle(() => resolve(v)), reject: (e) => settle(() => reject(e)) })
      w.send({ meterd: 'request', id, topic, data: null } satisfies ClusterMessage)
    })

  // Every ready worker's registry, combined by each metric's aggregator (sum, max, min). A worker
  // still starting, or one that does not answer in time, is left out rather than failing the scrape.
  const metrics = async () => {
    const parts = await Promise.allSettled([...ready].map((w) => ask(w, 'metrics', 2000)))
    const answered = parts.flatMap((p) => (p.status === 'fulfilled' ? [p.value as object] : []))
    if (answered.length === 0) throw new Error('no worker answered for its metrics')
    return AggregatorRegistry.aggregate(answered).metrics()
  }
  // Each worker pings every second: an answer shows this process is not stuck (its /healthz).
  const answers: Record<string, Answer> = { metrics, ping: () => null, ...opts.answers }
  const restarts: number[] = []
  let stopping = false
  let exitCode = 0
  let settle: (code: number) => void = () => undefined
  const done = new Promise<number>((r) => (settle = r))

  const peerDir = makePeerDir()
  process.on('exit', () => rmSync(peerDir, { recursive: true, force: true }))

  const fork = (index: number) => {
    const w = cluster.fork({ METERD_WORKER_INDEX: String(index), METERD_WORKERS: String(opts.workers), METERD_PEER_DIR: peerDir })
    byIndex.set(index, w)
    // A message to a worker that is dying fails (EPIPE), node:cluster's hand-over of a connection
    // included; unheard, that 'error' would end the supervisor and every listener with it. The
    // worker's exit follows, and it is replaced.
    w.on('error', (err) => logger.debug({ worker: index, err }, 'a message to a worker failed'))
    closeUntakenOnExit(w)
    w.on('message', (m: unknown) => {
      if (isClusterMessage(m)) void receive(w, index, m)
    })
    w.on('exit', (code, signal) => {
      ready.delete(w)
      if (byIndex.get(index) === w) byIndex.delete(index)
      if (stopping) {
        if (code !== 0 && code !== null) exitCode ||= code
        if (byIndex.size === 0) settle(exitCode)
        return
      }
      if (!everReady.has(index)) {
        // A worker that exits 78 (EX_CONFIG) or 74 (EX_IOERR: a full disk) has said why on stderr
        // in one line: add no log line to it.
        if (code === 78 || code === 74) logger.debug({ worker: index, code }, 'a worker failed to start; stopping')
        else logger.error({ worker: index, code, signal }, 'a worker failed to start; stopping')
        stop(code || 1)
        return
      }
      const now = Date.now()
      restarts.push(now)
      while (restarts.length && restarts[0] < now - RESTART_WINDOW_MS) restarts.shift()
      if (restarts.length > MAX_RESTARTS_PER_WINDOW) {
        logger.error({ worker: index, restarts: restarts.length }, 'workers keep dying; stopping')
        stop(1)
        return
      }
      logger.error({ worker: index, code, signal }, 'a worker died; starting a new one')
      fork(index)
    })
  }

  const receive = async (from: Worker, index: number, m: ClusterMessage) => {
    switch (m.meterd) {
      case 'ready': {
        const first = everReady.size < opts.workers
        // The leader starts alone (it makes the first admin key, migrates an old data layout);
        // the others follow once it is ready.
        if (index === 0 && everReady.size === 0) for (let i = 1; i < opts.workers; i++) fork(i)
        everReady.add(index)
        ready.add(from)
        if (first && everReady.size === opts.workers) opts.onReady?.()
        return
      }
      case 'reply': {
        const p = asked.get(m.id)
        if (!p) return
        if (m.error !== undefined) p.reject(new Error(m.error))
        else p.resolve(m.data)
        return
      }
      case 'request': {
        const answer = answers[m.topic]
        let reply: ClusterMessage
        try {
          if (!answer) throw new Error(`no answer for "${m.topic}"`)
          reply = { meterd: 'reply', id: m.id, data: await answer(m.data, from) }
        } catch (err) {
          reply = { meterd: 'reply', id: m.id, error: (err as Error).message }
        }
        if (from.isConnected()) from.send(reply)
        return
      }
    }
  }

  const stop = (code: number) => {
    if (stopping) return
    stopping = true
    exitCode = code
    if (byIndex.size === 0) return settle(exitCode)
    for (const w of byIndex.values()) w.process.kill('SIGTERM')
    setTimeout(() => {
      for (const w of byIndex.values()) w.process.kill('SIGKILL')
    }, opts.shutdownTimeoutMs + 2000).unref()
  }

  const onSignal = (signal: string) => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting at once')
      for (const w of byIndex.values()) w.process.kill('SIGKILL')
      process.exit(1)
    }
    logger.info({ signal, workers: byIndex.size }, 'draining all workers')
    stop(0)
  }
  process.on('SIGTERM', () => onSignal('SIGTERM'))
  process.on('SIGINT', () => onSignal('SIGINT'))
  // Not Node's default (an exit at once, leaving the workers to drain unwatched): drain as for SIGTERM.
  process.on('SIGHUP', () => onSignal('SIGHUP'))

  logger.info({ workers: opts.workers }, 'starting workers')
  fork(0)
  return done
}

/**
 * The directory of the workers' sockets to each other (peers.ts): one only this user can enter,
 * named after the supervisor's pid. It goes when the supervisor exits; one left by a supervisor
 * that was killed (kill -9) is removed by a later start (sweepPeerDirs).
 */
function makePeerDir(): string {
  const base = tmpdir()
  void sweepPeerDirs(base)
  return mkdtempSync(join(base, `meterd-workers-${process.pid}-`))
}

/**
 * Removes the socket directories of supervisors that are gone. A pid that this process cannot
 * see is not enough: a daemon in another PID namespace (a container sharing /tmp, `unshare -p`)
 * has pids this one does not know, and removing its live directory broke its workers' sockets.
 * So a directory goes only when its pid is not alive here and none of its sockets accepts a
 * connection. Runs in the background: nothing waits for it.
 */
async function sweepPeerDirs(base: string): Promise<void> {
  let names: string[]
  try {
    names = readdirSync(base)
  } catch {
    return
  }
  for (const name of names) {
    const m = /^meterd-workers-(\d+)-/.exec(name)
    if (!m || alive(Number(m[1]))) continue
    const dir = join(base, name)
    try {
      const sockets = readdirSync(dir).filter((f) => f.endsWith('.sock'))
      if ((await Promise.all(sockets.map((f) => listening(join(dir, f))))).some(Boolean)) continue
      rmSync(dir, { recursive: true, force: true })
    } catch {
      // Another user's (not ours to read or remove), or gone meanwhile.
    }
  }
}

/** Whether a Unix socket accepts a connection (its owner is alive, wherever its pid is seen). */
function listening(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const c = createConnection(path)
    c.once('connect', () => {
      c.destroy()
      resolve(true)
    })
    c.once('error', () => resolve(false))
  })
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/** Sends a message the supervisor itself publishes (e.g. a rate-limit block) to every worker. */
export function broadcast(topic: string, data: unknown): void {
  const m: ClusterMessage = { meterd: 'publish', topic, data, from: -1 }
  for (const w of Object.values(cluster.workers ?? {})) if (w?.isConnected()) w.send(m)
}

/**
 * node:cluster's round-robin: the primary accepts each connection and hands it to a worker (a
 * `newconn` message carrying it), keeping its own copy until the worker acknowledges it. One
 * handed to a worker that dies is never taken, and the primary never closes its copy: the client
 * would wait until its own timeout. The connections handed to `w` and not acknowledged are noted
 * here and closed when it exits, so their clients see the connection fail at once and retry
 * (dedup makes that safe). Connections still queued in the primary for a free worker are not
 * touched: they go to the workers alive (closing one would also make its later hand-over fail).
 */
function closeUntakenOnExit(w: Worker): void {
  type Handle = { close(): void }
  type ClusterInternal = { cmd?: string; act?: string; seq?: number; ack?: number }
  const untaken = new Map<number, Handle>()
  const proc = w.process as unknown as { send(m: unknown, handle?: unknown, ...rest: unknown[]): boolean; on(e: string, f: (m: ClusterInternal) => void): void }
  const send = proc.send
  proc.send = function (m: unknown, handle?: unknown, ...rest: unknown[]) {
    const c = m as ClusterInternal
    if (handle && c?.cmd === 'NODE_CLUSTER' && c.act === 'newconn' && c.seq !== undefined) untaken.set(c.seq, handle as Handle)
    return send.call(this, m, handle, ...rest)
  }
  proc.on('internalMessage', (m) => {
    if (m?.cmd === 'NODE_CLUSTER' && m.ack !== undefined) untaken.delete(m.ack)
  })
  // Not on 'disconnect': node holds that back while a handle it sent is unacknowledged, forever
  // once the worker is dead. Closing a connection the dead worker did take is harmless.
  w.once('exit', () => {
    for (const h of untaken.values()) h.close()
    untaken.clear()
  })
}
