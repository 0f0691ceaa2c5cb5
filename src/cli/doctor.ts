import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { StartupError } from '../core/startup-error.js'
import { checkDataFile, DamagedStoreError, EX_DATAERR } from '../store/check.js'
import { inspect, isRunning, LOCK_FILE, mayBeMeterd } from '../store/lock.js'
import { readEveryPage } from '../store/read-through.js'

export const DOCTOR_USAGE = `  doctor [--data-dir DIR]   check a data directory offline; exit 0 when sound, 65 when damaged`

export const DOCTOR_HELP = `usage: meterd doctor [--data-dir DIR] [--config FILE ...]

Checks the data directory (--data-dir, else storage.path of the config) without changing it:
the header pages of data.mdb, then every key and value of every database, read through LMDB
read-only in a child process (a damaged page makes LMDB crash; the crash is reported). Safe
beside a running daemon.

Exit status: 0 the store is sound; 65 it is damaged or missing (the problem is printed, with
what to do); 64 bad usage.`

/** `meterd doctor`: prints what it checked and answers the exit status. */
export function doctorCommand(dir: string, out: (line: string) => void): number {
  const problem = (line: string): number => {
    out(`PROBLEM: ${line}`)
    return EX_DATAERR
  }
  out(`data directory ${dir}`)
  if (!existsSync(dir)) return problem(`${dir} does not exist (check --data-dir or storage.path)`)
  let summary
  try {
    summary = checkDataFile(dir)
  } catch (err) {
    if (err instanceof DamagedStoreError || err instanceof StartupError) return problem(err.message)
    return problem(`cannot read ${join(dir, 'data.mdb')}: ${(err as Error).message}`)
  }
  if (!summary) return problem(`${dir} holds no store (no data.mdb); meterd run would create a new, empty one here`)
  out(`ok: ${summary.file}: ${summary.bytes} bytes, page size ${summary.pageSize}, ${summary.lastPage + 1} pages in use, transaction ${summary.txnid}`)

  const lock = join(dir, LOCK_FILE)
  try {
    // Read as a start reads it: a FIFO there would block a plain read for ever.
    const seen = inspect(lock)
    if (seen?.pid !== undefined) {
      // As the next start would judge it (src/store/lock.ts).
      const state = !isRunning(seen.pid)
        ? 'no such process runs (a daemon that died; the next start takes it over)'
        : mayBeMeterd(seen.pid)
          ? 'a daemon is running on this directory (the check reads a snapshot)'
          : 'that process is not a meterd (the pid was reused after a daemon died; the next start takes the file over)'
      out(`note: ${lock} names pid ${seen.pid}: ${state}`)
    } else if (seen) out(`note: ${lock} names no pid (left by a daemon that died, or not meterd's; the next start takes it over)`)
  } catch (err) {
    out(`note: ${(err as Error).message} (meterd run exits 78 while it is there)`)
  }

  // LMDB faults on a damaged page instead of throwing: read everything in a child process.
  const read = readEveryPage(dir)
  if ('crashed' in read) {
    return problem(
      `reading the store crashed (${read.crashed}): a page of ${summary.file} is damaged. Restore the data directory from a backup, or move data.mdb aside to start with an empty store.`,
    )
  }
  if ('failed' in read) return problem(`LMDB could not read ${summary.file}: ${read.failed}`)
  let bad = 0
  for (const db of read.databases) {
    if (db.entries !== db.counted) {
      bad++
      out(`PROBLEM: database ${db.name}: ${db.entries} entries read, where its header counts ${db.counted}`)
    } else out(`ok: database ${db.name}: ${db.entries} entries`)
  }
  if (bad) return problem(`${bad} database(s) of ${summary.file} are inconsistent: restore the data directory from a backup`)
  out(`the store is sound (${read.databases.length} databases)`)
  return 0
}
