import { open } from 'lmdb'
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'

/** One named database as `meterd doctor` found it. */
export interface WalkedDatabase {
  name: string
  /** Entries read by walking every key and value. */
  entries: number
  /** Entries LMDB's header of the database counts. */
  counted: number
}

/**
 * Opens the store in `dir` read-only and reads every key and value of every named database, so
 * that every page in use is touched. A damaged page makes LMDB fault (SIGSEGV, SIGBUS) rather than
 * throw: `meterd doctor` runs this in a child process and reports a fault as damage.
 */
export function walkStore(dir: string): WalkedDatabase[] {
  const root = open({ path: dir, noSubdir: false, readOnly: true, maxDbs: 256, encoding: 'binary', keyEncoding: 'binary' })
  try {
    const names: string[] = []
    for (const key of root.getKeys()) names.push((key as Buffer).toString('utf8').replace(/\0$/, ''))
    return names.map((name) => {
      const db = root.openDB({ name, encoding: 'binary', keyEncoding: 'binary' })
      let entries = 0
      for (const { value } of db.getRange({})) if (value !== undefined) entries++
      const counted = (db.getStats() as { entryCount: number }).entryCount
      return { name, entries, counted }
    })
  } finally {
    void root.close()
  }
}

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
  const child = spawnSync(process.execPath, [fileURLToPath(import.meta.url), dir], { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024 })
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

// As a child process of readEveryPage: walk the directory given and print the result as JSON.
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  try {
    process.stdout.write(JSON.stringify({ databases: walkStore(process.argv[2]) }) + '\n')
  } catch (err) {
    process.stdout.write(JSON.stringify({ error: (err as Error).message }) + '\n')
  }
}
