import { chmodSync, closeSync, existsSync, fsyncSync, mkdirSync, openSync, readdirSync, statSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'

/** The data directory and every file meterd writes in it are its owner's only. */
export const DATA_DIR_MODE = 0o700
export const DATA_FILE_MODE = 0o600
const WORLD = 0o007

/**
 * Creates the data directory owner-only (0700; the modes are given explicitly, so a umask can
 * only make them stricter), or, when it exists, takes world access away from it and from the
 * files in it (group access an operator set on purpose, e.g. for a backup agent, is kept).
 * Returns the paths it tightened, for a warning.
 */
export function prepareDataDir(path: string): string[] {
  if (!existsSync(path)) {
    makeDirs(path)
    return []
  }
  const tightened: string[] = []
  const tighten = (p: string) => {
    try {
      const mode = statSync(p).mode & 0o777
      if (mode & WORLD) {
        chmodSync(p, mode & ~WORLD)
        tightened.push(p)
      }
    } catch {
      // Not ours to change (another owner, a read-only mount): opening the store reports what matters.
    }
  }
  tighten(path)
  try {
    for (const f of readdirSync(path, { withFileTypes: true })) if (f.isFile()) tighten(join(path, f.name))
  } catch {}
  return tightened
}

/**
 * `mkdir -p` with DATA_DIR_MODE, one level at a time. Node's recursive mkdirSync never returns
 * where mkdir answers ENOENT under a parent that exists (a path under /proc, some FUSE mounts):
 * the daemon hung at start, busy in the kernel. Here that ENOENT is thrown, and the start says so.
 */
export function makeDirs(path: string): void {
  const missing: string[] = []
  for (let p = resolve(path); !existsSync(p); p = dirname(p)) {
    missing.push(p)
    if (dirname(p) === p) break
  }
  for (const dir of missing.reverse()) {
    try {
      mkdirSync(dir, { mode: DATA_DIR_MODE })
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
    }
  }
}

/** fsync of a file or of a directory (its entries). */
export function syncPath(path: string): void {
  const fd = openSync(path, 'r')
  try {
    fsyncSync(fd)
  } finally {
    closeSync(fd)
  }
}
