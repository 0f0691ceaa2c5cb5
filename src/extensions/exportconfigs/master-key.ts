import { randomBytes } from 'node:crypto'
import { chmodSync, closeSync, existsSync, fsyncSync, linkSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { DATA_FILE_MODE, syncPath } from '../../store/data-dir.js'
import { StartupError } from '../../core/startup-error.js'

/** The generated master key's file, beside data.mdb: back both up together. */
export const MASTER_KEY_FILE = 'master.key'

/** The key in `<dataDir>/master.key`, or undefined when there is none. */
export function readMasterKeyFile(dataDir: string): string | undefined {
  const path = join(dataDir, MASTER_KEY_FILE)
  if (!existsSync(path)) return undefined
  let key: string
  try {
    key = readFileSync(path, 'utf8').trim()
  } catch (err) {
    // One line and exit 78 (a file left by a start as root, a directory in its place), never a stack.
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'EACCES' || code === 'EPERM')
      throw new StartupError(`cannot read the master key ${path}: permission denied`, 'give the user running meterd read and write access to the data directory and every file in it')
    if (code === 'EISDIR') throw new StartupError(`${path} is a directory, not meterd's master key`, 'put the master.key file of your backup in its place')
    throw new StartupError(`cannot read the master key ${path}: ${(err as Error).message}`, 'restore it from the backup taken with data.mdb')
  }
  if (!/^[A-Za-z0-9_-]{43}$/.test(key))
    throw new StartupError(
      `${path} is damaged (not a meterd master key)`,
      'restore it from the backup taken with data.mdb; without it the webhook signing secrets cannot be read and must be rotated',
    )
  try {
    // A copy restored with looser permissions is made owner-only again.
    chmodSync(path, DATA_FILE_MODE)
  } catch {
    // Another user's file that we may read but not chmod: it is read all the same.
  }
  return key
}

/**
 * The master key of `<dataDir>/master.key`, made on first use: 32 random bytes (base64url),
 * written to a temporary file (0600), flushed, then linked into place, so the file is either
 * complete or absent, and two processes starting at once end up with the same key.
 */
export function loadOrCreateMasterKey(dataDir: string): { key: string; created: boolean; path: string } {
  const path = join(dataDir, MASTER_KEY_FILE)
  const existing = readMasterKeyFile(dataDir)
  if (existing) return { key: existing, created: false, path }
  const key = randomBytes(32).toString('base64url')
  const tmp = `${path}.${process.pid}.tmp`
  const fd = openSync(tmp, 'w', DATA_FILE_MODE)
  try {
    writeSync(fd, key + '\n')
    fsyncSync(fd)
  } finally {
    closeSync(fd)
  }
  let created = true
  try {
    linkSync(tmp, path)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
    created = false // another process made it first: use its key
  } finally {
    unlinkSync(tmp)
  }
  // The new directory entry must be on disk before any secret is sealed with the key.
  syncPath(dataDir)
  return created ? { key, created, path } : { key: readMasterKeyFile(dataDir)!, created, path }
}
