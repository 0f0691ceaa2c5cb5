import { closeSync, fstatSync, ftruncateSync, openSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import type { RootDatabase } from 'lmdb'

/** The space written ahead is checked after a commit at most this often. */
const CHECK_MS = 100
/** After a failed extension (a full disk, say), how long before the next try. */
const BACKOFF_MS = 60_000
const ZEROS = 1 << 20

export interface PreallocateOptions {
  /** Bytes to keep written ahead of the data; refilled when less than half is left. */
  bytes: number
  /** The file never grows past this (LMDB's map size: it could not use more). */
  maxFileBytes: number
  /** Called when an extension fails; preallocation pauses for a minute and tries again. */
  onError: (err: unknown) => void
}

/** Bytes of a data file of `fileSize` past LMDB's last committed page. */
export function aheadOfData(root: RootDatabase, fileSize: number): number {
  return fileSize - lastPageEnd(root)
}

function lastPageEnd(root: RootDatabase): number {
  const { lastPageNumber, pageSize } = root.getStats() as { lastPageNumber: number; pageSize: number }
  return (lastPageNumber + 1) * pageSize
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
 * Safety: zeros are written only at or past the file's size, and only inside an LMDB write
 * transaction. While it is open no other writer (thread or process) can write, LMDB has written
 * every page it ever committed or spilled (so all of them lie below that size), and the pages of
 * the open transaction are written at its commit, after the zeros. LMDB reads nothing past its
 * last page, so the zeros are never read; after a crash they are simply still there.
 */
export class Preallocator {
  private readonly fd: number
  private lastCheck = 0
  /** The extension queued and not yet run, if any. */
  private pending?: Promise<void>
  private pausedUntil = 0
  private closed = false
  private zeros?: Buffer

  constructor(
    private readonly root: RootDatabase,
    path: string,
    private readonly opts: PreallocateOptions,
  ) {
    this.fd = openSync(join(path, 'data.mdb'), 'r+')
    this.check()
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

  /** Queues an extension when less than half of the space ahead is left; resolves once it ran. */
  check(): Promise<void> {
    if (this.pending) return this.pending
    if (this.closed || performance.now() < this.pausedUntil) return Promise.resolve()
    let headroom: number
    try {
      headroom = aheadOfData(this.root, fstatSync(this.fd).size)
    } catch (err) {
      return Promise.resolve(this.fail(err))
    }
    if (headroom >= this.opts.bytes / 2) return Promise.resolve()
    return (this.pending = this.root
      .transaction(() => this.extend())
      .catch((err) => this.fail(err))
      .finally(() => (this.pending = undefined)))
  }

  /** Runs inside a write transaction (see the class comment): zeros from the file's end on. */
  private extend(): void {
    if (this.closed) return
    const size = fstatSync(this.fd).size
    const target = Math.min(lastPageEnd(this.root) + this.opts.bytes, this.opts.maxFileBytes)
    const zeros = (this.zeros ??= Buffer.alloc(ZEROS))
    let at = size
    try {
      while (at < target) at += writeSync(this.fd, zeros, 0, Math.min(zeros.length, target - at), at)
    } catch (err) {
      // Give the space back (it is all past what LMDB has written) rather than hold a part of it.
      try {
        ftruncateSync(this.fd, size)
      } catch {}
      this.fail(err)
    }
  }

  private fail(err: unknown): void {
    this.pausedUntil = performance.now() + BACKOFF_MS
    this.opts.onError(err)
  }

  /** Stops; the zeros already written stay (LMDB uses them after a restart too). */
  close(): void {
    if (this.closed) return
    this.closed = true
    closeSync(this.fd)
  }
}
