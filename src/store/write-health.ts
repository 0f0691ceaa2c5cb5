import { StoreUnwritableError } from '../core/errors.js'
import { freeMiB } from './disk-full.js'

/** While the store cannot write, it tries a small write this often; also the Retry-After it answers. */
export const WRITE_PROBE_MS = 5_000

/** What the store tells its owner (the daemon logs it and counts it). */
export interface WriteHealthListener {
  /** A commit failed; `becameUnwritable` on the first failure after a good write. */
  failed(reason: string, becameUnwritable: boolean): void
  /** A write succeeded again after failures. */
  recovered(unwritableForMs: number): void
}

/** An error lmdb-js rejects a write with when its transaction could not be committed. */
export function isCommitFailure(err: unknown): err is Error & { commitError?: Promise<unknown> } {
  return err instanceof Error && ('commitError' in err || err.message.startsWith('Commit failed'))
}

/**
 * Whether the store can write, learnt from the outcome of its commits (a full disk, an I/O
 * error). After a failed commit requests are still tried (the first one that fits succeeds),
 * and a small probe write runs every WRITE_PROBE_MS, so the store turns writable again by
 * itself once there is space, even with no traffic.
 */
export class WriteHealth {
  writable = true
  /** Why the store cannot write (a human line), while it cannot. */
  reason?: string
  /** When the store stopped being writable (ms since epoch). */
  since?: number
  private probe?: NodeJS.Timeout
  private probing = false

  constructor(
    private readonly dataFile: string,
    private readonly probeWrite: () => Promise<unknown>,
    private readonly listener: WriteHealthListener,
    private readonly probeMs = WRITE_PROBE_MS,
  ) {}

  succeeded(): void {
    if (this.writable) return
    const since = this.since ?? Date.now()
    this.writable = true
    this.reason = this.since = undefined
    if (this.probe) clearInterval(this.probe)
    this.probe = undefined
    this.listener.recovered(Date.now() - since)
  }

  /** Called with a failed write's error: answers the error to throw to the writer. */
  failed(err: unknown): unknown {
    if (!isCommitFailure(err)) return err // a step's own error (bad data, a bug): the disk is fine
    // lmdb-js rejects `commitError` with the cause of every failed commit; nobody else awaits it.
    err.commitError?.then(undefined, (cause: Error) => {
      if (!this.writable) this.reason = this.describe(cause)
    })
    const becameUnwritable = this.writable
    if (becameUnwritable) {
      this.writable = false
      this.since = Date.now()
      this.startProbing()
    }
    this.reason = this.describe()
    this.listener.failed(this.reason, becameUnwritable)
    return new StoreUnwritableError(`could not commit to ${this.dataFile}: ${err.message}`, this.probeMs, err)
  }

  close(): void {
    if (this.probe) clearInterval(this.probe)
    this.probe = undefined
  }

  private startProbing(): void {
    this.probe = setInterval(() => {
      if (this.probing) return
      this.probing = true
      this.probeWrite()
        .catch(() => undefined) // failed() has seen it
        .finally(() => (this.probing = false))
    }, this.probeMs)
    this.probe.unref()
  }

  private describe(cause?: Error): string {
    const mib = freeMiB(this.dataFile)
    const free = mib === undefined ? '' : `; ${mib} MiB free on its file system`
    return `cannot commit to ${this.dataFile}${cause ? ` (${cause.message})` : ''}${free}; writes are retried every ${this.probeMs / 1000} s`
  }
}
