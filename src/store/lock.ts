import { readFileSync, unlinkSync, writeFileSync } from 'node:fs'
import { basename, join } from 'node:path'
import { makeDirs } from './data-dir.js'

/** sysexits.h EX_TEMPFAIL: the data directory is in use; it can be retried once the other daemon stops. */
export const EX_TEMPFAIL = 75

/** The lock file in a data directory: the pid of the daemon that serves it. */
export const LOCK_FILE = 'meterd.pid'

export class DataDirLockedError extends Error {
  readonly exitCode = EX_TEMPFAIL
}

export interface DataDirLock {
  readonly path: string
  /** Removes the lock file (if it is still ours); idempotent. */
  release(): void
}

/**
 * Makes this process the one daemon of `dir`: LMDB itself lets any number of processes write one
 * environment (so `meterd keys` works beside a running daemon), but two daemons would each keep
 * their own in-memory state (dedup in flight, the analytics index, webhook deliveries) over it.
 *
 * The lock is a file created exclusively (O_EXCL) holding the pid. A file left by a daemon that
 * died (SIGKILL, a crash, a power cut) names a pid that no longer runs, or this process's own
 * (a container restarted with the same pid 1), and is taken over. Only the daemon's process takes
 * it (src/cli/main.ts); CLI commands and cluster workers do not.
 *
 * Throws DataDirLockedError (exit 75) when another live process holds it.
 */
export function acquireDataDirLock(dir: string): DataDirLock {
  makeDirs(dir)
  const path = join(dir, LOCK_FILE)
  const mine = `${process.pid}\n`
  for (let attempt = 0; ; attempt++) {
    try {
      writeFileSync(path, mine, { flag: 'wx', mode: 0o600 })
      break
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 0) throw lockError(err, path, dir)
    }
    const holder = readPid(path)
    if (holder !== undefined && holder !== process.pid && isRunning(holder) && mayBeMeterd(holder)) {
      throw new DataDirLockedError(
        `the data directory ${dir} is in use by another meterd (pid ${holder}, see ${path}); stop that one first, or give this one another storage.path (METERD_DATA_DIR). If no meterd runs, remove ${path}.`,
      )
    }
    // Stale: its daemon is gone. Removed, then created exclusively again (once).
    try {
      unlinkSync(path)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw lockError(err, path, dir)
    }
  }
  let released = false
  return {
    path,
    release() {
      if (released) return
      released = true
      try {
        if (readPid(path) === process.pid) unlinkSync(path)
      } catch {}
    },
  }
}

function readPid(path: string): number | undefined {
  try {
    const n = Number.parseInt(readFileSync(path, 'utf8').trim(), 10)
    return Number.isInteger(n) && n > 0 ? n : undefined
  } catch {
    return undefined
  }
}

/** Whether a process with this pid runs (possibly another user's). */
export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM' // alive, but another user's
  }
}

/**
 * False when the process of `pid` is known not to be a meterd: after a crash and a reboot (or in a
 * new container) the stale file's pid may be reused by another program, which would otherwise
 * block every start until the file is removed by hand. Its command line (Linux /proc) names the
 * launcher (bin/meterd.js) or the process's own script; when it cannot be read, it may be one.
 */
export function mayBeMeterd(pid: number): boolean {
  let cmdline: string
  try {
    cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8')
  } catch {
    return true
  }
  const mine = basename(process.argv[1] ?? 'meterd')
  return cmdline === '' || cmdline.includes('meterd') || cmdline.includes(mine)
}

function lockError(err: unknown, path: string, dir: string): Error {
  const e = new Error(`cannot create the lock file ${path} in the data directory ${dir} (${(err as Error).message}); check that the directory exists and this user may write it`) as NodeJS.ErrnoException
  // The errno stays readable: a full disk (ENOSPC) is reported as one (exit 74), not as exit 1.
  e.code = (err as NodeJS.ErrnoException).code
  return e
}
