import { statfsSync } from 'node:fs'
import { constants } from 'node:os'

const { ENOSPC, EFBIG, EDQUOT } = constants.errno
/** LMDB's MDB_MAP_FULL: the data file reached its map size (lmdb-js maps more first; this is when it could not). */
const MDB_MAP_FULL = -30792

const FREE_SPACE = 'free some space on its file system'

/**
 * Why a write to the data directory failed for want of space, and what to do, in words;
 * undefined when `err` is another failure. Node's fs errors name the errno in `code`; lmdb-js's
 * carry its number.
 */
export function lackOfSpace(err: unknown): { why: string; fix: string } | undefined {
  const code = (err as { code?: unknown } | undefined)?.code
  const message = (err as Error | undefined)?.message ?? ''
  if (code === ENOSPC || code === 'ENOSPC') return { why: 'no space is left on its disk (ENOSPC)', fix: FREE_SPACE }
  if (code === EDQUOT || code === 'EDQUOT') return { why: 'the disk quota is exceeded (EDQUOT)', fix: `${FREE_SPACE}, or raise the quota` }
  if (code === EFBIG || code === 'EFBIG') return { why: 'the file-size limit is reached (EFBIG)', fix: 'raise the file-size limit of the process (ulimit -f)' }
  if (code === MDB_MAP_FULL || message.includes('MDB_MAP_FULL')) return { why: 'the data file cannot grow (MDB_MAP_FULL)', fix: FREE_SPACE }
  return undefined
}

/** Space left on the file system holding `path`, in MiB; undefined when it cannot be read. */
export function freeMiB(path: string): number | undefined {
  try {
    const s = statfsSync(path)
    return Math.floor((s.bavail * s.bsize) / 1048576)
  } catch {
    return undefined
  }
}

/**
 * When the kernel refuses one of its pages, LMDB itself writes "Write error: … position N, size M"
 * to stderr without a line end (its error then reads "Attempting to write page …"): ends that
 * line, so that meterd's own line that follows starts on a line of its own.
 */
export function endLmdbWriteErrorLine(err: unknown): void {
  if (/Attempting to write page/.test((err as Error | undefined)?.message ?? '')) process.stderr.write('\n')
}

/** The cause of lmdb-js's "Commit failed" error (EFBIG, ENOSPC, EIO…), which it rejects `commitError` with; the error itself when it has none. */
export async function commitCause(failure: unknown): Promise<unknown> {
  const cause = (failure as { commitError?: Promise<unknown> } | undefined)?.commitError
  if (!cause) return failure
  // lmdb-js rejects it in the same turn as the batch's writes: it has settled by the next one.
  return Promise.race([cause.then(() => failure, (err: unknown) => err), new Promise((resolve) => setImmediate(() => resolve(failure)))])
}

/**
 * A write to the data directory `dir` that failed with `cause`, in words: the problem (naming the
 * directory, why, and the space left on its file system) and the fix. A short write (EIO from
 * LMDB) cannot be told from another I/O error, so it is asked about, not asserted.
 */
export function unwritableDataDir(dir: string, cause: unknown): { problem: string; fix: string } {
  const space = lackOfSpace(cause)
  const free = freeMiB(dir)
  const left = free === undefined ? '' : `, ${free} MiB free on its file system`
  const problem = space
    ? `the data directory ${dir} is full: ${space.why}${left}`
    : `cannot write to the data directory ${dir}: ${(cause as Error)?.message ?? String(cause)} (is its disk full?)${left}`
  endLmdbWriteErrorLine(cause)
  return { problem, fix: space?.fix ?? FREE_SPACE }
}
