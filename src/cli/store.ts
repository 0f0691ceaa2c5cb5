import { storeUnwritableIn } from '../core/errors.js'
import { StartupError, dataDirFailure } from '../core/startup-error.js'
import { DamagedStoreError } from '../store/check.js'
import { quietLmdbWriteLoopErrors, surviveCommitFailures } from '../store/commit-failures.js'
import { commitCause, lackOfSpace, unwritableDataDir } from '../store/disk-full.js'
import { Store, type StoreOptions } from '../store/store.js'
import { isCommitFailure } from '../store/write-health.js'
import { EX_IOERR, ExitError } from './command.js'

/**
 * Runs a command on the store of a data directory (`keys`, `reprice`). A write the disk cannot
 * take ends the command with one line naming the directory, what was not done (`unwritten`, e.g.
 * "no key was created") and exit 74, never with lmdb-js's stack traces or a silent exit.
 */
export async function withStore<T>(opts: StoreOptions, unwritten: string, fn: (store: Store) => Promise<T>): Promise<T> {
  // For the rest of the process: lmdb-js rejects promises of its own that nobody awaits when a
  // commit fails, possibly after the command's own error was handled (commit-failures.ts).
  surviveCommitFailures()
  quietLmdbWriteLoopErrors()
  // Past a file-size limit (ulimit -f) writes fail with EFBIG, as on a full disk, instead of the signal ending the process.
  process.on('SIGXFSZ', () => undefined)
  let store: Store
  try {
    store = new Store(opts)
  } catch (err) {
    // A new store's first pages could not be written.
    if (lackOfSpace(err) !== undefined) throw fullDisk(opts.path, err, unwritten)
    // A damaged file says so itself; a directory this user may not use is one line and exit 78, as for run.
    throw err instanceof DamagedStoreError || err instanceof StartupError ? err : dataDirFailure(err, opts.path)
  }
  try {
    return await fn(store)
  } catch (err) {
    // A write through durable() fails as StoreUnwritableError; one of a bare transaction (reprice)
    // with lmdb-js's own error, which the store is told of here: it then closes without waiting
    // for that commit's flush, which never comes.
    const failure = storeUnwritableIn(err)?.cause ?? (isCommitFailure(err) ? (store.health.failed(err), err) : undefined)
    if (failure === undefined) throw err
    throw fullDisk(opts.path, await commitCause(failure), unwritten)
  } finally {
    await store.close()
  }
}

function fullDisk(dir: string, cause: unknown, unwritten: string): ExitError {
  const { problem, fix } = unwritableDataDir(dir, cause)
  return new ExitError(`${problem}; ${unwritten}. ${fix[0].toUpperCase()}${fix.slice(1)}, then run the command again`, EX_IOERR)
}
