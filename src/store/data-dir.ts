import { chmodSync, existsSync, mkdirSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'

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
    mkdirSync(path, { recursive: true, mode: DATA_DIR_MODE })
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
