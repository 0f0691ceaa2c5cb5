import { existsSync, statfsSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { isDeepStrictEqual } from 'node:util'
import { open, type Database, type Key, type RootDatabase } from 'lmdb'
import { checkDataFile } from './check.js'
import { DATA_FILE_MODE, prepareDataDir } from './data-dir.js'
import type { DbOptions, Environment } from './environment.js'
import { aheadOfData, Preallocator } from './preallocate.js'
import type { ValueEncoder, ValueEncoderClass } from './record-codec.js'
import type { Replaced } from '../ports/tables.js'
import { LmdbTableView } from './table-view.js'
import { migrateUsageLayout } from './usage-layout.js'
import { UsageStore } from './usage-store.js'
import { WriteHealth, type WriteHealthListener } from './write-health.js'
import { LmdbWriteUnit } from './write-unit.js'

const NO_OVERWRITE = { noOverwrite: true } as any // lmdb-js's put options; its types omit noOverwrite

/** A write unit queued in a group of units that share one transaction callback (Store.commitUnit). */
interface GroupMember {
  run: () => void
  onDurable: () => void
  resolve: () => void
  reject: (err: unknown) => void
  error: unknown
  threw: boolean
  settled: boolean
}

export interface StoreOptions {
  path: string
  maxSizeMb?: number
  /** MiB kept written ahead of the data in the data file (src/store/preallocate.ts); 0 or absent: none. */
  preallocateMb?: number
  /** Told when writing ahead fails (it pauses and tries again later; nothing else is affected). */
  onPreallocateError?: (err: unknown) => void
  /** Told when a commit fails (a full disk) and when writes succeed again (src/store/write-health.ts). */
  writeHealth?: WriteHealthListener
  /** How often a small write is tried while the store cannot write (default 5 s). */
  writeProbeMs?: number
}

/**
 * One LMDB environment per data directory, shared by every component and by the CLI
 * (LMDB is safe across processes, so `meterd keys create` works beside a running daemon).
 * Named databases keep each concern apart; `durable()` is the only way a write is
 * acknowledged: committed, then flushed to disk.
 */
export class Store implements Environment {
  readonly root: RootDatabase
  readonly usage: UsageStore
  /** Whether commits succeed; the daemon's readiness and metrics read it. */
  readonly health: WriteHealth
  private readonly dbs = new Map<string, Database<any, any>>()
  private readonly views = new Map<string, LmdbTableView<any, any>>()
  private readonly preallocator?: Preallocator
  private closed = false
  /** The units whose transaction callback has not run yet: a unit committed now joins them (commitUnit). */
  private openGroup?: GroupMember[]
  /** Paths of an existing data directory that were world-accessible and were tightened (src/store/data-dir.ts). */
  readonly tightened: string[]

  constructor(readonly opts: StoreOptions) {
    this.tightened = prepareDataDir(opts.path)
    // LMDB faults on a damaged file and takes an empty one for a new store: refuse both first.
    checkDataFile(opts.path)
    refuseNewLockFileWithoutSpace(opts.path)
    const mapSize = (opts.maxSizeMb ?? 16384) * 1024 * 1024
    this.root = open({
      path: opts.path,
      // The path is always a directory holding data.mdb and lock.mdb. Left to itself lmdb-js
      // takes a path whose last part has a dot (`/var/lib/meterd.d`, `data.v2`) for a file name.
      noSubdir: false,
      maxDbs: 64,
      mapSize,
      // Commits are flushed after they are visible (overlappingSync, lmdb-js's default on
      // Linux); durable() waits for the flush, so nothing is acknowledged before fsync.
      overlappingSync: true,
      // data.mdb and lock.mdb: owner-only (lmdb's default is 0664; its types omit the option).
      ...({ permissionsMode: DATA_FILE_MODE } as {}),
    })
    this.usage = new UsageStore(this)
    // A directory of an earlier layout is brought to this one before anything reads it.
    migrateUsageLayout(this, this.usage)
    const probes = this.db<string, number>('store-health')
    this.health = new WriteHealth(
      join(opts.path, 'data.mdb'),
      () => this.durable(probes.put('probe', Date.now())),
      opts.writeHealth ?? { failed: () => undefined, recovered: () => undefined },
      opts.writeProbeMs,
    )
    if (opts.preallocateMb) {
      this.preallocator = new Preallocator(this.root, opts.path, {
        bytes: opts.preallocateMb * 1024 * 1024,
        maxFileBytes: mapSize,
        onError: opts.onPreallocateError ?? (() => {}),
      })
    }
  }

  /** Bytes of the data file past LMDB's last page: the space written ahead. */
  preallocated(): number {
    return aheadOfData(this.root, statSync(join(this.opts.path, 'data.mdb')).size)
  }

  /** Tops up the space written ahead now, instead of at the next check (tests). */
  preallocate(): Promise<void> {
    return this.preallocator?.check() ?? Promise.resolve()
  }

  /**
   * A named database; keys and values use lmdb-js's ordered-binary and msgpack encodings.
   * `codec` derives the database's value encoder from lmdb-js's msgpack one (record-codec.ts);
   * `keyEncoder` replaces ordered-binary for the keys (and LMDB then compares them with memcmp:
   * tuple-key.ts).
   */
  db<K extends import('lmdb').Key = import('lmdb').Key, V = any>(
    name: string,
    opts: DbOptions = {},
  ): Database<V, K> {
    let db = this.dbs.get(name)
    if (!db) {
      const { sharedStructures, codec, ...rest } = opts
      // lmdb-js constructs `encoder.Encoder` with the database's shared-structure options. The
      // msgpack class is the one lmdb-js itself uses (msgpackr's), taken from the root database.
      const encoder = codec ? { encoder: { Encoder: codec((this.root as unknown as { encoder: ValueEncoder }).encoder.constructor as ValueEncoderClass) } } : {}
      // Shared structures keep property names out of every value: smaller records, faster encoding.
      db = this.root.openDB({ name, ...rest, ...encoder, ...(sharedStructures ? { sharedStructuresKey: Symbol.for('structures') } : {}) } as any)
      this.dbs.set(name, db)
    }
    return db as Database<V, K>
  }

  /**
   * A table as its component reads it (src/store/table-view.ts): through the rows of a shared
   * table that another replica changed and this one has not committed yet. One per database,
   * shared by its readers and the shared tables' adapter, which holds those rows (redis/tables.ts).
   */
  view<K extends Key, V>(name: string): LmdbTableView<K, V> {
    let view = this.views.get(name)
    if (!view) this.views.set(name, (view = new LmdbTableView(this.db<K, V>(name))))
    return view
  }

  /**
   * Puts `value` unless `key` exists (LMDB's MDB_NOOVERWRITE), inside a write transaction only;
   * true when it was put. One B-tree operation where a get and a put would be two.
   */
  putIfAbsent<K extends import('lmdb').Key, V>(db: Database<V, K>, key: K, value: V): boolean {
    // Inside a write transaction lmdb-js writes synchronously and answers with a settled
    // promise that carries the outcome as `result`.
    return (db.put(key, value, NO_OVERWRITE) as Promise<boolean> & { result?: boolean }).result === true
  }

  /**
   * Whether a team holds `max` rows of `db` already (rows whose value names it as `team`): the
   * per-team limit, counted inside the write transaction that would add one more, so creations on
   * several workers at once stop at the limit. A scan of the table, which such limits keep small.
   */
  teamHolds<V extends { team: string }>(db: Database<V, any>, team: string, max: number): boolean {
    if (max === Infinity) return false
    let held = 0
    for (const { value } of db.getRange({})) if (value.team === team && ++held >= max) return true
    return false
  }

  /**
   * Replaces the value `read` of a key with `value`, in the transaction that checks it is still
   * that value, and resolves once durable. `gone` when the key was removed meanwhile (an update
   * that read its row while a delete committed must not bring the row back); `changed`, with the
   * value as it is now, when another write committed since the read: another worker on this data
   * directory, whose change a row merged from the older copy would undo. The caller merges its
   * change over `now` and tries again.
   */
  replaceExisting<K extends Key, V>(db: Database<V, K>, key: K, read: V, value: V): Promise<Replaced<V>> {
    return this.durable(
      this.root.transaction((): Replaced<V> => {
        const now = db.get(key)
        if (now === undefined) return { outcome: 'gone' }
        if (!isDeepStrictEqual(now, read)) return { outcome: 'changed', now }
        db.put(key, value)
        return { outcome: 'replaced' }
      }),
    )
  }

  /**
   * Makes the next read see every commit made so far, another process's too. lmdb-js reads
   * through one snapshot until the timer it sets when it renews it fires: a worker told of
   * another's change within the same turn of its event loop as an earlier read would otherwise
   * reload its cache from before the change, and keep it until the next one.
   */
  readLatest(): void {
    this.root.resetReadTxn()
  }

  /** A new unit of writes committed as one transaction (src/store/write-unit.ts). */
  unit(): LmdbWriteUnit {
    return new LmdbWriteUnit(this)
  }

  /**
   * Runs `run` in a write transaction and resolves once that transaction is on disk (rejects
   * with what `run` threw, once the transaction committed, as a transaction's own promise
   * would). Units committed while the transaction callback of an earlier one has not run yet
   * join that callback: lmdb-js would run them in the same transaction anyway (it appends
   * every callback queued meanwhile to one group), and one callback, one commit promise and
   * one `flushed` subscription for the group cost less than one per request (each `flushed`
   * is a Promise.all in lmdb-js; docs/performance.md). A unit whose `run` throws leaves the
   * others of its group alone, as lmdb-js does for a throwing callback.
   */
  commitUnit(run: () => void, onDurable: () => void): Promise<void> {
    let resolve!: () => void
    let reject!: (err: unknown) => void
    const done = new Promise<void>((res, rej) => {
      resolve = res
      reject = rej
    })
    const member: GroupMember = { run, onDurable, resolve, reject, error: undefined, threw: false, settled: false }
    const open = this.openGroup
    if (open !== undefined) {
      open.push(member)
      return done
    }
    const group = [member]
    // Open before the transaction is queued: inside a synchronous write transaction lmdb-js
    // runs the callback at once, and the callback closes its group.
    this.openGroup = group
    try {
      this.runGroup(group)
    } catch (err) {
      if (this.openGroup === group) this.openGroup = undefined
      throw err // a closed database: thrown, as root.transaction throws it
    }
    return done
  }

  private runGroup(group: GroupMember[]): void {
    const write = this.root.transaction(() => {
      // From here on a unit committed goes to a transaction of its own.
      if (this.openGroup === group) this.openGroup = undefined
      for (let i = 0; i < group.length; i++) {
        const m = group[i]
        try {
          m.run()
        } catch (err) {
          m.threw = true
          m.error = err
        }
      }
    })
    this.preallocator?.written()
    // As in durable(): the commit and the flush of the batch that holds it (read now), the
    // first failure rejecting each member not yet settled.
    let left = 2
    const fail = (err: unknown): void => {
      if (this.openGroup === group) this.openGroup = undefined
      for (const m of group) {
        if (m.settled) continue
        m.settled = true
        m.reject(this.health.failed(err))
      }
    }
    const settled = (): void => {
      if (--left > 0) return
      if (!this.health.writable) this.health.succeeded()
      for (const m of group) {
        if (m.settled) continue
        m.settled = true
        m.onDurable()
        m.resolve()
      }
    }
    write.then(() => {
      for (const m of group) {
        if (!m.threw || m.settled) continue
        m.settled = true
        m.reject(this.health.failed(m.error))
      }
      settled()
    }, fail)
    this.root.flushed.then(settled, fail)
  }

  /**
   * Resolves once `write` (already queued) has committed and the commit is on disk.
   *
   * `root.flushed` resolves once every write queued before it was read is flushed, and it is
   * read here, synchronously, right after `write` was queued: so it is the flush of the batch
   * that holds `write`. Read after the commit instead, it would be the flush of whatever batch
   * the other requests had queued meanwhile, and under load every request would wait for one
   * more commit and fsync than its own (docs/performance.md).
   * `onDurable` runs just before the promise resolves (the write unit records that it is committed).
   */
  durable<T>(write: Promise<T>, onDurable?: () => void): Promise<T> {
    this.preallocator?.written()
    // Both outcomes are awaited by hand rather than with Promise.all (its array, element
    // functions and the extra promise of `flushed.then`): this runs once per request. As with
    // Promise.all, the first failure rejects (and is counted once), and the result waits for both.
    return new Promise<T>((resolve, reject) => {
      let left = 2
      let result: T
      let failed = false
      const settled = (): void => {
        if (--left > 0) return
        if (!this.health.writable) this.health.succeeded()
        onDurable?.()
        resolve(result)
      }
      const fail = (err: unknown): void => {
        if (failed) return
        failed = true
        reject(this.health.failed(err))
      }
      write.then((r) => {
        result = r
        settled()
      }, fail)
      // Read now, while `flushed` still stands for the batch that holds `write`.
      this.root.flushed.then(settled, fail)
    })
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    this.health.close()
    await this.preallocator?.close()
    // After a failed commit lmdb-js never settles that batch's flush, and its close() waits for
    // it: awaited, close() would never return (a command would end silently with exit 0). The
    // environment is then left to the process's exit; every committed write is on disk.
    if (!this.health.writable) return void this.root.close()
    await this.root.flushed
    await this.root.close()
  }
}

/** Well above the pages LMDB touches to make a new lock.mdb (8 KiB) and the header pages of data.mdb. */
const NEW_STORE_MIN_FREE_BYTES = 64 * 1024

/**
 * LMDB makes lock.mdb sparse and writes it through a memory map: on a file system with no page
 * left (a full tmpfs) that write is a SIGSEGV/SIGBUS, killing the process and leaving an empty
 * data.mdb that is then refused as damaged. Too little space is said first, as ENOSPC, which the
 * daemon and the CLI report as a full disk (exit 74).
 */
function refuseNewLockFileWithoutSpace(dir: string): void {
  if (existsSync(join(dir, 'lock.mdb'))) return
  let free: number
  try {
    const s = statfsSync(dir)
    free = s.bavail * s.bsize
  } catch {
    return // cannot tell: let LMDB try
  }
  if (free >= NEW_STORE_MIN_FREE_BYTES) return
  const err = new Error(`ENOSPC: no space left on device, ${free} bytes free where a new store needs ${NEW_STORE_MIN_FREE_BYTES}`) as NodeJS.ErrnoException
  err.code = 'ENOSPC'
  throw err
}
