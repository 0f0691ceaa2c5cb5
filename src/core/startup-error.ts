import { commitCause, endLmdbWriteErrorLine, lackOfSpace, unwritableDataDir } from '../store/disk-full.js'
import { storeUnwritableIn } from './errors.js'

/** sysexits.h EX_CONFIG: a start that fails on something the operator's config or host must change. */
export const EX_CONFIG = 78
/** sysexits.h EX_IOERR: the data directory could not be written (a full disk), as for the CLI's commands. */
export const EX_IOERR = 74

/**
 * A start-up failure the operator can fix: one line for stderr naming the cause and the fix,
 * and the exit code (78 for configuration problems). Components and the store throw it where
 * they know the cause; the CLI prints it without a stack.
 */
export class StartupError extends Error {
  constructor(
    readonly cause_: string,
    readonly fix: string,
    readonly exitCode = EX_CONFIG,
  ) {
    super(`${cause_} — ${fix}`)
  }
}

/**
 * A listener that could not bind, in the operator's words: which setting, why, what to do.
 * `shape` is how the setting is written (a config endpoint is host:port; a CLI may take the host alone).
 */
export function listenFailure(err: unknown, endpoint: string, setting: string, shape = 'host:port, e.g. 127.0.0.1:8080'): Error {
  const e = err as NodeJS.ErrnoException
  const text = `${e?.code ?? ''} ${e?.message ?? String(err)}`
  const where = `cannot listen on ${endpoint} (${setting})`
  if (/EADDRINUSE/.test(text))
    return new StartupError(`${where}: the address is already in use, by another meterd or another program`, `stop that process or set ${setting} to a free port`)
  if (/EACCES|EPERM/.test(text))
    return new StartupError(`${where}: not permitted (ports below 1024 need privileges)`, `choose a port above 1024 in ${setting}`)
  if (/EADDRNOTAVAIL/.test(text))
    return new StartupError(`${where}: no network interface of this host has that address`, `use 127.0.0.1, 0.0.0.0 or one of this host's addresses in ${setting}`)
  if (/ENOTFOUND|EAI_AGAIN|Name resolution failed|invalid endpoint/i.test(text))
    return new StartupError(`${where}: the host part does not resolve or the endpoint is not host:port`, `write ${setting} as ${shape}`)
  return new StartupError(`${where}: ${e?.message ?? String(err)}`, `check ${setting}`)
}

/** A data directory the store could not create or open. */
export function dataDirFailure(err: unknown, path: string): Error {
  const e = err as NodeJS.ErrnoException
  const text = `${e?.code ?? ''} ${e?.message ?? String(err)}`
  const where = `cannot open the data directory ${path} (storage.path)`
  // lmdb-js says only "Permission denied: Attempting to setup locks" (no code) for a lock.mdb it may not write.
  if (/EACCES|EPERM|Permission denied/.test(text))
    return new StartupError(`${where}: permission denied`, `give the user running meterd read and write access to it, or point storage.path (METERD_DATA_DIR) elsewhere`)
  if (/EEXIST|ENOTDIR/.test(text))
    return new StartupError(`${where}: it (or a parent) is a file, not a directory`, `point storage.path (METERD_DATA_DIR) at a directory`)
  // lmdb-js again says it in words only: "Read-only file system: Attempting to setup locks".
  if (/EROFS|Read-only file system/.test(text)) return new StartupError(`${where}: the file system is read-only`, `point storage.path (METERD_DATA_DIR) at a writable directory`)
  if (/ENOENT/.test(text))
    return new StartupError(`${where}: a directory cannot be made there (ENOENT: the file system, /proc say, has no such directories)`, `point storage.path (METERD_DATA_DIR) at a directory on a disk`)
  const space = lackOfSpace(err)
  if (space) {
    endLmdbWriteErrorLine(err)
    return new StartupError(`${where}: the disk is full: ${space.why}`, space.fix, EX_IOERR)
  }
  return err instanceof Error ? err : new Error(String(err))
}

/**
 * A write the daemon cannot start without (the first admin key) that the data directory did not
 * take: one line naming the directory, why, and what was not done, exit 74. Undefined when `err`
 * is not a failed commit.
 */
export async function startupWriteFailure(err: unknown, dir: string, unwritten: string): Promise<StartupError | undefined> {
  const failure = storeUnwritableIn(err)?.cause
  if (failure === undefined) return undefined
  const { problem, fix } = unwritableDataDir(dir, await commitCause(failure))
  return new StartupError(`${problem}; ${unwritten}`, `${fix}, then start meterd again`, EX_IOERR)
}
