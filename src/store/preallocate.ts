import { closeSync, fdatasync, fstat, fstatSync, openSync, write } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import type { RootDatabase } from 'lmdb'

/** The space written ahead is checked after a commit at most this often. */
const CHECK_MS = 100
/** After a failed extension (a full disk, say), how long before the next try. */
const BACKOFF_MS = 60_000
/**
 * Zeros are appended and flushed this much at a time: a commit whose flush runs while a step is
 * still unflushed carries at most this much of it (docs/performance.md).
 */
const STEP_BYTES = 256 * 1024

const writeAsync = promisify(write)
const fdatasyncAsync = promisify(fdatasync)
const fstatAsync = promisify(fstat)

export interface PreallocateOptions {
  /** Bytes to keep written ahead of the data; refilled when less than half is left. */
  bytes: number
  /** The file is not extended past this (LMDB's map size: it could not use more). */
  maxFileBytes: number
  /** Called when an extension fails; preallocation pauses for a minute and tries again. */
  onError: (err: unknown) => void
}

/** Bytes of a data file of `fileSize` past LMDB's last committed page. */
export function aheadOfData(root: RootDatabase, fileSize: number): number {
  return fileSize - lastPageEnd(root)
}

/** lmdb-js's native environment: `info()` reads LMDB's meta page (mdb_env_info), `stat()` the main database. */
interface NativeEnv {
  info(): { lastPageNumber: number }
  stat(): { pageSize: number }
}

/**
 * The end of LMDB's last committed page. From `env.info()` alone, not `getStats()`, which also
 * renews a read transaction and builds three more statistics objects (the free list's among
 * them): about a third of the instructions, and this runs up to ten times a second under load.
 */
function lastPageEnd(root: RootDatabase): number {
  const env = (root as unknown as { env: NativeEnv }).env
  return (env.info().lastPageNumber + 1) * pageSizeOf(env)
}

const pageSizes = new WeakMap<NativeEnv, number>()
function pageSizeOf(env: NativeEnv): number {
  let size = pageSizes.get(env)
  if (size === undefined) pageSizes.set(env, (size = env.stat().pageSize))
  return size
}

/**
 * Keeps the LMDB data file written with zeros ahead of its last page, the way PostgreSQL
 * zero-fills a WAL segment before using it.
 *
 * LMDB grows its file at the end (about 0.7 pages per commit under ingest). A commit that
 * extends the file makes its `fdatasync` write file-system metadata too (the new blocks and the
 * size) besides the data; a commit whose pages fall in blocks already written does not. On the
 * development VM a single-record commit issues 0.3–0.9 fewer device writes, and its p99 was
 * 35–55% lower while the host was busy (docs/performance.md).
 * On a copy-on-write file system (btrfs, ZFS) every write allocates anyway, and `bytes: 0`
 * (`storage.preallocate_mb: 0`) turns this off.
 *
 * The zeros go through the libuv thread pool in steps of STEP_BYTES, each appended and then
 * flushed on its own, outside LMDB's transactions: the event loop never waits for them, and no
 * commit has megabytes of zeros to flush with its own pages.
 *
 * Safety: the descriptor is opened with O_APPEND, so each step lands at the end of the file as
 * it is at that instant, atomically: POSIX allows no other change to the file between placing
 * the offset and the write (Linux holds the inode's lock across both). Every page LMDB, or any
 * other process, has written lies below that end, so zeros never cover data; a page LMDB
 * writes later may cover zeros, which is what they are for. LMDB reads nothing past its last
 * page, so the zeros are never read; after a crash they are simply still there. For the same
 * reason a failed step is not truncated away: another writer may have written past it since.
 */
export class Preallocator {
  private readonly fd: number
  private lastCheck = 0
  /**
   * The file's size at its last fstat, or after our last append. The file never shrinks (LMDB
   * and this class only append or write within it), so when even this size leaves half the
   * space ahead, the real one does too, and the check needs no system call.
   */
  private knownSize = 0
  /** The fill under way, if any. */
  private filling?: Promise<void>
  private pausedUntil = 0
  private closed = false
  private readonly zeros = Buffer.alloc(STEP_BYTES)

  constructor(
    private readonly root: RootDatabase,
    path: string,
    private readonly opts: PreallocateOptions,
  ) {
    this.fd = openSync(join(path, 'data.mdb'), 'a')
    void this.check()
  }

  /**
   * Called for every durable write (Store.durable): the file only grows when something is
   * written, so checking then, at most every CHECK_MS, keeps up without waking an idle daemon.
   */
  written(): void {
    const now = performance.now()
    if (now - this.lastCheck < CHECK_MS) return
    this.lastCheck = now
    void this.check()
  }

  /** Starts a fill when less than half of the space ahead is left; resolves once it is done. */
  check(): Promise<void> {
    if (this.filling) return this.filling
    if (this.closed || performance.now() < this.pausedUntil) return Promise.resolve()
    try {
      const half = this.opts.bytes / 2
      const lastEnd = lastPageEnd(this.root)
      if (this.knownSize - lastEnd >= half) return Promise.resolve()
      this.knownSize = fstatSync(this.fd).size
      if (this.knownSize - lastEnd >= half) return Promise.resolve()
    } catch (err) {
      this.fail(err)
      return Promise.resolve()
    }
    return (this.filling = this.fill().finally(() => (this.filling = undefined)))
  }

  /** Appends zeros, a flushed step at a time, until `bytes` lie past LMDB's last page. */
  private async fill(): Promise<void> {
    try {
      while (!this.closed) {
        const size = (this.knownSize = (await fstatAsync(this.fd)).size)
        const target = Math.min(lastPageEnd(this.root) + this.opts.bytes, this.opts.maxFileBytes)
        if (size >= target) return
        await writeAsync(this.fd, this.zeros, 0, Math.min(STEP_BYTES, target - size), null)
        await fdatasyncAsync(this.fd)
      }
    } catch (err) {
      this.fail(err)
    }
  }

  private fail(err: unknown): void {
    this.pausedUntil = performance.now() + BACKOFF_MS
    this.opts.onError(err)
  }

  /** Stops once the step under way is done; the zeros already written stay (LMDB uses them after a restart too). */
  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    await this.filling
    closeSync(this.fd)
  }
}
