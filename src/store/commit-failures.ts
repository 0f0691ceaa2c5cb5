import { isCommitFailure } from './write-health.js'

/** lmdb-js's cause of a failed commit, rejected from its write loop (`commitError`). */
function isLmdbWriteLoopError(reason: unknown): boolean {
  if (!(reason instanceof Error) || typeof (reason as { code?: unknown }).code !== 'number') return false
  const firstFrame = reason.stack?.split('\n').find((l) => l.trimStart().startsWith('at '))
  return firstFrame !== undefined && /[\\/]lmdb[\\/]write\.js:/.test(firstFrame)
}

/**
 * Keeps the daemon up through a failed LMDB commit (a full disk).
 *
 * When a commit fails, lmdb-js rejects every write of its batch, including promises of its own
 * that nobody can await (the start of an event-turn batch; `commitError`, the cause, on every
 * error), and Node exits on an unhandled rejection. The writes meterd awaits have seen the
 * failure (their requests were answered 503 and the store turned not writable, see
 * write-health.ts); these leftovers are only counted. Any other unhandled rejection keeps Node's
 * default: it is thrown, and the process exits.
 *
 * Installed by the daemon's process (src/cli/main.ts), not by the Service: tests embed Services.
 */
export function surviveCommitFailures(onLeftover: (reason: Error) => void = () => undefined): () => void {
  const handler = (reason: unknown): void => {
    if (isCommitFailure(reason)) {
      reason.commitError?.then(undefined, () => undefined) // the same failure's cause: seen
      onLeftover(reason)
      return
    }
    if (isLmdbWriteLoopError(reason)) {
      onLeftover(reason as Error)
      return
    }
    throw reason
  }
  process.on('unhandledRejection', handler)
  return () => void process.off('unhandledRejection', handler)
}

/**
 * For a command (not the daemon): lmdb-js prints the cause of a failed commit itself, with its
 * stack (console.error); the command says it in one line of its own instead. Anything else
 * printed through console.error is kept.
 */
export function quietLmdbWriteLoopErrors(): () => void {
  const original = console.error
  console.error = (...args: unknown[]) => {
    if (args.length === 1 && isLmdbWriteLoopError(args[0])) return
    original.apply(console, args)
  }
  return () => void (console.error = original)
}
