import { open } from 'lmdb'
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

// As a child process of readEveryPage (read-through.ts): walk the directory given and print the result as JSON.
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  try {
    process.stdout.write(JSON.stringify({ databases: walkStore(process.argv[2]) }) + '\n')
  } catch (err) {
    process.stdout.write(JSON.stringify({ error: (err as Error).message }) + '\n')
  }
}
