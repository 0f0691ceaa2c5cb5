import cluster from 'node:cluster'
import { componentType } from '../host/component.js'
import { broadcast, supervise, workerCount } from '../core/cluster/supervisor.js'
import { WorkerBus } from '../core/cluster/worker-bus.js'
import type { MeterdConfig } from '../core/config/schema.js'
import { Service } from '../host/service.js'
import { StartupError, dataDirFailure } from '../core/startup-error.js'
import { createTelemetry } from '../core/telemetry.js'
import { returnStartupMemoryWhileIdle } from '../core/idle-memory.js'
import { LeaseTable } from '../extensions/ratelimit/cluster.js'
import { quietLmdbWriteLoopErrors, surviveCommitFailures } from '../store/commit-failures.js'
import { DataDirLockedError, acquireDataDirLock } from '../store/lock.js'
import { DamagedStoreError, checkDataFile } from '../store/check.js'
import { ExitError } from './command.js'
import { configOrExit } from './config.js'

/**
 * `meterd run`, the daemon: a single process, the supervisor of several workers, or one of its
 * workers (node:cluster starts each with the same command line, so it comes here too).
 */
export async function run(files: string[]): Promise<number> {
  const { config, plan } = configOrExit(files, { toRun: true })
  const workers = cluster.isWorker ? Number(process.env.METERD_WORKERS) : workersFor(config)
  if (cluster.isPrimary) {
    // One daemon per data directory: its primary takes the lock (never a worker, never a CLI command).
    let lock
    try {
      lock = acquireDataDirLock(config.storage.path)
    } catch (err) {
      throw err instanceof DataDirLockedError || err instanceof StartupError ? err : dataDirFailure(err, config.storage.path)
    }
    process.on('exit', () => lock.release())
    // A damaged data file is refused here, once, rather than by every worker as it starts.
    try {
      checkDataFile(config.storage.path)
    } catch (err) {
      // A data.mdb this user may not read (left by a start as root) is a permission to fix, not a crash.
      throw err instanceof DamagedStoreError || err instanceof StartupError ? err : dataDirFailure(err, config.storage.path)
    }
  }
  if (cluster.isPrimary && workers > 1) return runSupervisor(config, workers)
  const index = Number(process.env.METERD_WORKER_INDEX)
  const telemetry = createTelemetry({ level: config.service.telemetry.logs.level, bindings: cluster.isWorker ? { worker: index } : undefined })
  const warn = (message: string, err?: unknown) => telemetry.logger.warn({ err }, message)
  const peerDir = process.env.METERD_PEER_DIR
  if (cluster.isWorker && !peerDir) throw new ExitError('a worker needs METERD_PEER_DIR, which its supervisor sets', 1)
  const bus = cluster.isWorker ? new WorkerBus(workers, index, process, peerDir!, warn, config.server.supervisor_timeout_seconds) : undefined
  // The supervisor combines every ready worker's registry for /metrics.
  bus?.answer('metrics', () => telemetry.registry.getMetricsAsJSON())
  const service = new Service({ config, plan, telemetry, cluster: bus })
  // A failed commit (a full disk) is answered 503 and retried; lmdb-js's leftovers of it must not end the process.
  surviveCommitFailures((reason) => service.logger.debug({ err: reason }, 'a failed commit, already answered'))
  // Past a file-size limit (ulimit -f) writes fail with EFBIG, as on a full disk, instead of the signal killing the process.
  process.on('SIGXFSZ', () => undefined)
  let stopping = false
  const stop = (signal: string) => {
    if (stopping) {
      service.logger.warn({ signal }, 'second signal: exiting at once')
      process.exit(1)
    }
    stopping = true
    service.logger.info({ signal }, 'draining')
    service.shutdown().then(
      () => process.exit(0),
      (err) => {
        service.logger.error({ err }, 'shutdown failed')
        process.exit(1)
      },
    )
  }
  process.on('SIGTERM', () => stop('SIGTERM'))
  if (bus) {
    // SIGHUP (a closed terminal) reaches the whole process group too: the supervisor decides.
    process.on('SIGHUP', () => undefined)
    // A worker drains when its supervisor says so (SIGTERM) or goes away; Ctrl-C reaches the
    // whole process group, and the supervisor decides.
    process.on('SIGINT', () => undefined)
    process.on('disconnect', () => {
      // No supervisor is left to kill a worker whose drain hangs (it would after this long).
      setTimeout(() => process.exit(1), config.server.shutdown_timeout_ms + 2000).unref()
      stop('disconnect')
    })
    // node:cluster would instead end the worker at once when the channel closes unasked (its
    // documented guard, off when this is true), cutting every request in flight: those that hold
    // their rate-limit share are then stored and answered, those waiting for one get a 503.
    cluster.worker!.exitedAfterDisconnect = true
  } else {
    process.on('SIGINT', () => stop('SIGINT'))
    // Node's default for SIGHUP (a closed terminal, `kill -HUP` expecting a reload) ends the
    // process at once, cutting requests in flight and leaving meterd.pid: drain as for SIGTERM.
    process.on('SIGHUP', () => stop('SIGHUP'))
  }
  // A commit that fails while starting (the first admin key on a full disk) is said in one line
  // (startup-error.ts), not also with the stack lmdb-js prints for it.
  const loud = quietLmdbWriteLoopErrors()
  try {
    await bus?.open()
    await service.start()
  } catch (err) {
    // A cause the operator can fix is one line; anything else is logged with its stack as well.
    if (!(err instanceof StartupError)) service.logger.error({ err }, 'start failed')
    await service.shutdown().catch(() => undefined)
    service.logger.flush?.()
    if (err instanceof StartupError) throw err
    throw new ExitError(`start failed: ${(err as Error).message}`, 1)
  } finally {
    loud()
  }
  bus?.ready()
  returnStartupMemoryWhileIdle()
  return await new Promise<number>(() => undefined) // runs until a signal
}

/** How many workers: `auto` is one per core, except that a daemon with an `upstream` exporter (a sidecar) runs as one process. */
function workersFor(config: MeterdConfig): number {
  const single = Object.keys(config.exporters ?? {}).some((id) => componentType(id) === 'upstream')
  return single ? 1 : workerCount(config.server.workers)
}

/** The primary of a daemon with several workers: it serves nothing itself (core/cluster/supervisor.ts). */
async function runSupervisor(config: MeterdConfig, workers: number): Promise<number> {
  const { logger } = createTelemetry({ level: config.service.telemetry.logs.level, bindings: { worker: 'supervisor' }, defaultMetrics: false })
  const leases = new LeaseTable(workers)
  const code = await supervise({
    workers,
    logger,
    shutdownTimeoutMs: config.server.shutdown_timeout_ms,
    answers: leases.answers(broadcast),
    onReady: () => logger.info({ workers }, 'every worker is ready'),
  })
  logger.info({ code }, 'meterd stopped')
  logger.flush?.()
  process.exit(code)
}
