import { chmodSync } from 'node:fs'
import { join } from 'node:path'
import { open } from 'lmdb'
import { DATA_FILE_MODE, syncPath } from './data-dir.js'

/**
 * Copies the store of `source` into `target`/data.mdb (a directory that exists and holds no
 * data.mdb: LMDB creates the file exclusively) from one read snapshot, while a daemon may go on
 * writing: LMDB's mdb_env_copy2, which lmdb-js calls `backup`. Writers are held only while the
 * two header pages are copied; the rest is read from the snapshot, which keeps the pages it
 * sees from being reused until the copy ends. `compact` leaves out the free pages and
 * renumbers the rest (smaller, slower).
 *
 * The source is opened read-only, as `meterd doctor` reads it: nothing is migrated or written
 * (LMDB registers the reader in lock.mdb, which it shares with the daemon). The copy is made
 * owner-only and flushed to disk before this returns.
 */
export async function copyStore(source: string, target: string, compact: boolean): Promise<void> {
  let root
  try {
    root = open({ path: source, noSubdir: false, readOnly: true })
  } catch (err) {
    throw new SourceUnopened(err)
  }
  try {
    await root.backup(target, compact)
  } finally {
    await root.close()
  }
  const file = join(target, 'data.mdb')
  // LMDB creates it 0666 less the umask.
  chmodSync(file, DATA_FILE_MODE)
  // LMDB writes the copy with O_DIRECT where it can, but never fsyncs it (nor its size).
  syncPath(file)
}

/** The source store could not be opened (lock.mdb this user may not write, say): not a failure to write the copy. */
export class SourceUnopened extends Error {
  constructor(override readonly cause: unknown) {
    super((cause as Error)?.message ?? String(cause))
  }
}
