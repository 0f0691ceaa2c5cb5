import { chmodSync, copyFileSync, constants, existsSync, mkdirSync, readdirSync, realpathSync, renameSync, rmSync, statSync } from 'node:fs'
import { constants as osConstants } from 'node:os'
import { basename, dirname, isAbsolute, join, relative, resolve } from 'node:path'
import { StartupError, dataDirFailure } from '../core/startup-error.js'
import { MASTER_KEY_FILE } from '../extensions/exportconfigs/master-key.js'
import { SourceUnopened, copyStore } from '../store/backup.js'
import { DamagedStoreError, EX_DATAERR, checkDataFile, type DataFileSummary } from '../store/check.js'
import { freeMiB } from '../store/disk-full.js'
import { readEveryPage } from '../store/read-through.js'
import { DATA_DIR_MODE, DATA_FILE_MODE, makeDirs, syncPath } from '../store/data-dir.js'
import { EX_CANTCREAT, EX_IOERR, ExitError, UsageError, type Command } from './command.js'

export type BackupValues = { to?: string; 'data-dir'?: string; compact?: boolean; config?: string[] }

/** `meterd backup` (its definition is in main.ts): needs the config only for the data directory (and to say where the master key comes from). */
export async function backupCommand(v: BackupValues, command: Command): Promise<number> {
  if (!v.to) throw new UsageError('backup needs --to DIR (a new directory for the copy)', command)
  // The config, and the components it loads, only when the data directory is not given.
  const config = v['data-dir'] === undefined || v.config ? (await import('./config.js')).configOrExit(v.config ?? []).config : undefined
  const source = resolve(v['data-dir'] ?? config!.storage.path)
  checkSource(source)
  const target = resolve(v.to)
  if (within(realpathSync(source), realPath(target)))
    throw new UsageError(`backup: --to ${v.to} is inside the data directory ${source}; put the backup elsewhere`, command)
  refuseExisting(target)

  const parent = dirname(target)
  // Hidden, and named for what it is: never taken for a finished backup.
  const partial = join(parent, `.${basename(target)}.partial-${process.pid}`)
  try {
    makeDirs(parent)
    mkdirSync(partial, { mode: DATA_DIR_MODE })
  } catch (err) {
    throw new ExitError(`cannot create ${partial}: ${reason(err)}; nothing was written`, EX_CANTCREAT)
  }
  const removePartial = () => rmSync(partial, { recursive: true, force: true })
  // Ctrl-C or a stop while LMDB copies (on a thread of its own): take the partial copy away.
  const signals = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const
  const interrupted = (signal: NodeJS.Signals) => {
    removePartial()
    process.stderr.write(`meterd: backup interrupted (${signal}): the partial copy was removed; nothing was written to ${target}\n`)
    process.exit(128 + osConstants.signals[signal])
  }
  for (const s of signals) process.on(s, interrupted)
  // Past a file-size limit (ulimit -f) the copy fails with EFBIG, as on a full disk, instead of the signal ending the process.
  process.on('SIGXFSZ', () => undefined)

  let copy: DataFileSummary
  let keyCopied: boolean
  try {
    // A compacting copy walks the source's trees in this process, where a damaged page would
    // fault: the source is read through in a child first (the plain copy takes pages as they are).
    if (v.compact) verifyStore(source, source, target)
    try {
      await copyStore(source, partial, v.compact === true)
    } catch (err) {
      // Opening the source (the store is shared: lock.mdb must be writable) or writing the copy.
      if (err instanceof SourceUnopened) throw dataDirFailure(err.cause, source)
      // Compacting: a page of the source LMDB cannot follow.
      if (/^MDB_(PAGE_NOTFOUND|CORRUPTED)/.test(reason(err))) throw sourceDamaged(source, target, `LMDB could not copy it (${reason(err)})`)
      throw unwritable(parent, target, err)
    }
    keyCopied = copyMasterKey(source, partial)
    // The header pages of the copy, as doctor checks them first; its counts for the summary.
    try {
      copy = checkDataFile(partial)!
    } catch (err) {
      const problem = err instanceof DamagedStoreError ? err.problem : reason(err)
      throw new ExitError(`the copy of ${source} is not sound (${problem}); nothing was written to ${target}. Check the data directory with meterd doctor`, EX_IOERR)
    }
    // Then every page of it, as doctor reads a store: a copy is only as sound as the source's pages.
    verifyStore(partial, source, target)
    // Reading it made LMDB's reader table there; a restore starts without one.
    rmSync(join(partial, 'lock.mdb'), { force: true })
    syncPath(partial)
    try {
      // Onto an empty directory (allowed) rename replaces it; onto one filled meanwhile it fails.
      renameSync(partial, target)
    } catch (err) {
      throw new ExitError(`cannot put the backup in place at ${target}: ${reason(err)}; nothing was written there`, EX_CANTCREAT)
    }
    syncPath(parent)
  } catch (err) {
    removePartial()
    if (err instanceof ExitError || err instanceof StartupError || err instanceof DamagedStoreError) throw err
    throw unwritable(parent, target, err)
  } finally {
    for (const s of signals) process.off(s, interrupted)
  }

  // The embedded config sets it to the empty string when METERD_MASTER_KEY is unset.
  const configured = Boolean((config?.extensions.exportconfigs as { master_key?: string } | undefined)?.master_key)
  printSummary({ source, target, copy, keyCopied, compact: v.compact === true, configured })
  return 0
}

/** What was written, and how to check and restore it. */
function printSummary(b: { source: string; target: string; copy: DataFileSummary; keyCopied: boolean; compact: boolean; configured: boolean }): void {
  const out = (line: string) => process.stdout.write(line + '\n')
  out(`backup of ${b.source} written to ${b.target} (a snapshot at transaction ${b.copy.txnid})`)
  out(`  data.mdb    ${b.copy.bytes} bytes${recordsOf(b.copy)}${b.compact ? ', compacted' : ''}`)
  if (b.keyCopied) out(`  master.key  copied (it decrypts the webhook signing secrets: keep the backup owner-only, as it is written)`)
  else
    out(
      `  master.key  none in ${b.source}, so none in the backup: the master key then comes from exportconfigs.master_key (METERD_MASTER_KEY); keep that value with this backup, or the webhook signing secrets must be rotated after a restore`,
    )
  if (b.keyCopied && b.configured) out(`  note: exportconfigs.master_key is configured too: keep that value with this backup (master.key opens only the secrets sealed before it was set)`)
  out(`check it:  meterd doctor --data-dir ${b.target}`)
  out(`restore:   stop meterd, move its data directory aside and put this directory in its place (or point storage.path, METERD_DATA_DIR, at it), then start meterd`)
}

/** As doctor and run judge a data directory: missing, without a store, or damaged is exit 65. */
function checkSource(source: string): void {
  if (!existsSync(source)) throw new ExitError(`the data directory ${source} does not exist (check --data-dir or storage.path); nothing was written`, EX_DATAERR)
  let summary
  try {
    summary = checkDataFile(source)
  } catch (err) {
    throw err instanceof DamagedStoreError || err instanceof StartupError ? err : dataDirFailure(err, source)
  }
  if (!summary) throw new ExitError(`${source} holds no store (no data.mdb): there is nothing to back up (check --data-dir or storage.path)`, EX_DATAERR)
}

/**
 * Reads every key and value of `dir` (the copy, or the source before compacting it) in a child
 * process: LMDB faults on a damaged page. The copy's pages are the source's, so damage found in
 * either is the source's (exit 65, as doctor says).
 */
function verifyStore(dir: string, source: string, target: string): void {
  const read = readEveryPage(dir)
  if ('crashed' in read) throw sourceDamaged(source, target, `reading every page of it crashed (${read.crashed}): a page is damaged`)
  if ('failed' in read) throw sourceDamaged(source, target, `LMDB could not read it (${read.failed})`)
  if (read.inconsistent.length)
    throw sourceDamaged(source, target, read.inconsistent.map((db) => `database ${db.name} has ${db.entries} entries where its header counts ${db.counted}`).join('; '))
}

function sourceDamaged(source: string, target: string, what: string): ExitError {
  return new ExitError(
    `the data file of ${source} is damaged: ${what}. Check it with meterd doctor --data-dir ${source}; restore it from an earlier backup. Nothing was written to ${target}`,
    EX_DATAERR,
  )
}

/** A backup never overwrites: DIR may be absent, or an empty directory. */
function refuseExisting(target: string): void {
  let entries: string[]
  try {
    if (!statSync(target).isDirectory()) throw new ExitError(`${target} exists and is not a directory; the backup goes to a new directory and never overwrites. Nothing was written`, EX_CANTCREAT)
    entries = readdirSync(target)
  } catch (err) {
    if (err instanceof ExitError) throw err
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return
    throw new ExitError(`cannot use ${target}: ${reason(err)}; nothing was written`, EX_CANTCREAT)
  }
  if (entries.length) throw new ExitError(`${target} exists and is not empty; the backup goes to a new (or empty) directory and never overwrites. Nothing was written`, EX_CANTCREAT)
}

/** Copies master.key, owner-only and flushed, when the data directory has one; false when it has none. */
function copyMasterKey(source: string, target: string): boolean {
  const from = join(source, MASTER_KEY_FILE)
  if (!existsSync(from)) return false
  const to = join(target, MASTER_KEY_FILE)
  // Byte for byte; owner-only whatever the source's mode (an operator may have widened it for a backup agent).
  copyFileSync(from, to, constants.COPYFILE_EXCL)
  chmodSync(to, DATA_FILE_MODE)
  syncPath(to)
  return true
}

/**
 * The usage records of a store, from its header: lmdb-js keeps the msgpack shared structures in
 * the same database, under a key of its own, from the first record on.
 */
function recordsOf(copy: DataFileSummary): string {
  const entries = copy.entries['usage-records']
  if (entries === undefined) return ''
  const records = Math.max(0, entries - 1)
  return `, ${records} usage record${records === 1 ? '' : 's'}`
}

/** Whether `path` is `dir` or lies under it. */
function within(dir: string, path: string): boolean {
  const rel = relative(dir, path)
  return rel === '' || (!rel.startsWith('..') && !isAbsolute(rel))
}

/** `path` with its existing part resolved through symbolic links (the rest may not exist yet). */
function realPath(path: string): string {
  try {
    return realpathSync(path)
  } catch {
    const parent = dirname(path)
    return parent === path ? path : join(realPath(parent), basename(path))
  }
}

/** A write of the backup that failed: lmdb-js says only the errno's words ("No space left on device"), so the space left is told too. */
function unwritable(parent: string, target: string, err: unknown): ExitError {
  const free = freeMiB(parent)
  const left = free === undefined ? '' : ` (${free} MiB free on its file system)`
  return new ExitError(`cannot write the backup in ${parent}: ${reason(err)}${left}; nothing was written to ${target}`, EX_IOERR)
}

function reason(err: unknown): string {
  return (err as Error)?.message ?? String(err)
}
