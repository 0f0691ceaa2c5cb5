import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import type { WalkedDatabase } from './walk.js'

// walk.js loads lmdb; this module does not, so that the CLI's table (doctor's help) stays light.
const WALKER = fileURLToPath(new URL('./walk.js', import.meta.url))

/**
 * What reading every page of a store found: its databases (those whose entries read differ from
 * their header's count are inconsistent); or LMDB faulted (`crashed`: the signal or exit status,
 * a damaged page); or LMDB refused to read it (`failed`: why).
 */
export type StoreRead = { databases: WalkedDatabase[]; inconsistent: WalkedDatabase[] } | { crashed: string } | { failed: string }

/**
 * Runs walkStore on `dir` in a child process (a damaged page makes LMDB fault, which would end
 * the caller): `meterd doctor` on a data directory, `meterd backup` on its copy before it is
 * put in place.
 */
export function readEveryPage(dir: string): StoreRead {
  const child = spawnSync(process.execPath, [WALKER, dir], { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024 })
  if (child.signal || child.status !== 0) return { crashed: child.signal ?? `exit ${child.status}` }
  let walked: { databases?: WalkedDatabase[]; error?: string }
  try {
    walked = JSON.parse(child.stdout)
  } catch {
    return { failed: child.stderr || child.stdout }
  }
  if (walked.error || !walked.databases) return { failed: String(walked.error) }
  return { databases: walked.databases, inconsistent: walked.databases.filter((db) => db.entries !== db.counted) }
}
