import { closeSync, constants, fstatSync, linkSync, lstatSync, openSync, readdirSync, readFileSync, readSync, renameSync, unlinkSync, writeFileSync, type BigIntStats } from 'node:fs'
import { basename, join } from 'node:path'
import { StartupError } from '../core/startup-error.js'
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

/** How long a start waits for another start that is taking over a stale file (it takes milliseconds). */
const TAKEOVER_WAIT_MS = 10_000

/**
 * Makes this process the one daemon of `dir`: LMDB itself lets any number of processes write one
 * environment (so `meterd keys` works beside a running daemon), but two daemons would each keep
 * their own in-memory state (dedup in flight, the analytics index, webhook deliveries) over it.
 *
 * The lock is the file `meterd.pid` holding the pid. It is written under a name of this process's
 * own first and then hard-linked into place, which fails when the name exists: it appears whole
 * (a start never reads a live daemon's file empty), and of any number of starts one gets it.
 * A file left by a daemon that died (SIGKILL, a crash, a power cut: then often empty) names a pid
 * that no longer runs, or this process's own (a container restarted with the same pid 1), or is
 * no pid at all (garbage, a symbolic link, which meterd never writes), and is taken over (see
 * takeOver). Only the daemon's process takes it (src/cli/main.ts); CLI commands and cluster
 * workers do not.
 *
 * Throws DataDirLockedError (exit 75) when another live process holds it, and a StartupError
 * (exit 78) when `meterd.pid` is something meterd cannot have written (a directory, a FIFO).
 */
export function acquireDataDirLock(dir: string): DataDirLock {
  makeDirs(dir)
  const path = join(dir, LOCK_FILE)
  const mine = join(dir, `${LOCK_FILE}.${process.pid}.tmp`)
  try {
    // A leftover of an earlier process with this pid (a container's pid 1) may be anything: not followed.
    unlinkSync(mine)
  } catch {}
  try {
    writeFileSync(mine, `${process.pid}\n`, { flag: 'wx', mode: 0o600 })
  } catch (err) {
    throw lockError(err, path, dir)
  }
  try {
    const until = Date.now() + TAKEOVER_WAIT_MS
    for (;;) {
      if (link(mine, path, dir)) break
      const seen = inspect(path)
      if (!seen) continue // removed meanwhile (its daemon stopped): create it again
      const holder = seen.pid
      if (holder !== undefined && holder !== process.pid && isRunning(holder) && mayBeMeterd(holder)) {
        throw new DataDirLockedError(
          `the data directory ${dir} is in use by another meterd (pid ${holder}, see ${path}); stop that one first, or give this one another storage.path (METERD_DATA_DIR). If no meterd runs, remove ${path}.`,
        )
      }
      const busy = takeOver(dir, path, mine, seen)
      if (busy === TAKEN) break
      if (busy === LOOK_AGAIN) continue
      // Another start is replacing the stale file; it takes milliseconds, then holds the lock or has died.
      if (Date.now() > until) {
        throw new DataDirLockedError(
          `the data directory ${dir} is being taken over by another meterd (pid ${busy}) from a daemon that died, for over ${TAKEOVER_WAIT_MS / 1000} s; stop that one first, or give this one another storage.path (METERD_DATA_DIR).`,
        )
      }
      sleep(5)
    }
  } finally {
    try {
      unlinkSync(mine)
    } catch {}
  }
  sweep(dir)
  let released = false
  return {
    path,
    release() {
      if (released) return
      released = true
      try {
        if (inspect(path)?.pid === process.pid) unlinkSync(path)
      } catch {}
    },
  }
}

/** The pid file as found: which file it is (to tell it from a later one) and the pid in it, if any. */
export interface Seen {
  key: string
  pid: number | undefined
}

/**
 * What is at `path` now, undefined when nothing is. A regular file is read without following a
 * symbolic link and without blocking; anything but a file or a symbolic link is refused (exit 78).
 */
export function inspect(path: string): Seen | undefined {
  let fd: number
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK)
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOENT') return undefined
    if (code !== 'ELOOP' && code !== 'EISDIR' && code !== 'ENXIO') throw lockError(err, path, join(path, '..'))
    // A symbolic link (ELOOP), a directory, a socket (ENXIO): what it is decides.
    let st: BigIntStats
    try {
      st = lstatSync(path, { bigint: true })
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined
      throw lockError(e, path, join(path, '..'))
    }
    if (st.isSymbolicLink()) return { key: identity(st), pid: undefined }
    throw unusable(path, st)
  }
  try {
    const st = fstatSync(fd, { bigint: true })
    if (!st.isFile()) throw unusable(path, st)
    const buf = Buffer.alloc(32)
    const text = buf.toString('utf8', 0, readSync(fd, buf, 0, buf.length, 0))
    const n = /^\s*\d+\s*$/.test(text) ? Number(text) : 0
    const pid = Number.isSafeInteger(n) && n > 0 ? n : undefined
    return { key: identity(st, pid), pid }
  } finally {
    closeSync(fd)
  }
}

/**
 * A file's identity, to tell it from a later file of the same name: its inode, last change and
 * pid (a new file may get a freed inode, and, where timestamps are coarse, the same time).
 */
function identity(st: BigIntStats, pid?: number): string {
  return `${st.ino}-${st.mtimeNs}-${pid ?? 'none'}`
}

function unusable(path: string, st: BigIntStats): StartupError {
  const what = st.isDirectory() ? 'a directory' : st.isFIFO() ? 'a FIFO' : st.isSocket() ? 'a socket' : 'a device'
  return new StartupError(
    `the pid file ${path} is ${what}, not a file meterd wrote`,
    `remove it (meterd writes ${LOCK_FILE} itself, and removes it when it stops), or point storage.path (METERD_DATA_DIR) elsewhere`,
  )
}

const TAKEN = -1
const LOOK_AGAIN = 0

/**
 * Replaces the stale file `seen` at `path` by this process's `mine`: TAKEN, LOOK_AGAIN (the file
 * changed), or the pid of a live start that is taking it over (to wait for).
 *
 * Removing the stale file and creating a new one would race: a start that judged it stale a
 * moment earlier would then remove the new one, and both would run. So exactly one start may
 * replace a given stale file: the one that creates its claim, `meterd.pid.takeover-<its identity>`,
 * hard-linked from `mine` (so it names the claimer's pid from its first instant). The claimer
 * checks that the file is still the one it judged stale, then renames `mine` over it: the name is
 * never absent, so no plain create slips in. A claimer that died before renaming leaves its claim;
 * the next claim of that file is then `…-after-<its pid>`, a name only one start can make in turn,
 * so neither a waiting start nor a crash at any step lets two through or blocks every later start.
 */
function takeOver(dir: string, path: string, mine: string, seen: Seen): number {
  let claim = join(dir, `${LOCK_FILE}.takeover-${seen.key}`)
  for (;;) {
    if (link(mine, claim, dir)) break
    const claimer = inspect(claim)
    if (!claimer) return LOOK_AGAIN // a takeover just ended
    if (claimer.pid !== undefined && claimer.pid !== process.pid && isRunning(claimer.pid) && mayBeMeterd(claimer.pid)) return claimer.pid
    claim += `-after-${claimer.pid ?? 'none'}`
  }
  try {
    // Verified after claiming: the file cannot change between here and the rename but by its claimer.
    if (inspect(path)?.key !== seen.key) return LOOK_AGAIN
    renameSync(mine, path)
    return TAKEN
  } catch (err) {
    throw lockError(err, path, dir)
  } finally {
    try {
      unlinkSync(claim)
    } catch {}
  }
}

/** Creates `to` as a hard link of `from`; false when `to` exists. */
function link(from: string, to: string, dir: string): boolean {
  try {
    linkSync(from, to)
    return true
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false
    throw lockError(err, to, dir)
  }
}

/**
 * Removes what starts killed while taking the lock left (their claims and own files): none can be
 * in use any more, the pid file being this daemon's. A start that is still racing checks the pid
 * file again after claiming, and finds it taken.
 */
function sweep(dir: string): void {
  try {
    for (const name of readdirSync(dir)) {
      const own = /^meterd\.pid\.(\d+)\.tmp$/.exec(name)
      if (name.startsWith(`${LOCK_FILE}.takeover-`) || (own && !isRunning(Number(own[1])))) {
        try {
          unlinkSync(join(dir, name))
        } catch {}
      }
    }
  } catch {}
}

function sleep(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)
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
