/** Shared set-up of the gateway tests (not a test itself). */
import { createTelemetry } from '../../src/core/telemetry.js'
import { openRedisSharedState } from '../../src/store/redis/index.js'
import { Store } from '../../src/store/store.js'

/**
 * A replica's store and Redis shared state in this process (as `meterd keys` opens them), closed
 * when `t` ends. resync_seconds is far apart: a test that wants resyncs runs them itself.
 */
export async function openReplica(t: { teardown(fn: () => Promise<void>): void }, path: string, redisUrl: string) {
  const store = new Store({ path })
  const { logger, registry } = createTelemetry({ level: 'silent' })
  const shared = await openRedisSharedState(
    { url: redisUrl, key_prefix: 'meterd:', command_timeout_ms: 1000, connect_timeout_ms: 2000, claim_ttl_seconds: 30, resync_seconds: 60, leader_lease_seconds: 5 },
    store,
    logger,
    registry,
  )
  t.teardown(async () => {
    await shared.close()
    await store.close()
  })
  return { store, shared }
}

/** Polls `ok` every 5 ms; resolves with the time it took to hold, or throws after `timeoutMs`. */
export async function within(timeoutMs: number, ok: () => Promise<boolean>): Promise<number> {
  const t0 = performance.now()
  for (;;) {
    if (await ok()) return performance.now() - t0
    if (performance.now() - t0 > timeoutMs) throw new Error(`not within ${timeoutMs} ms`)
    await new Promise((r) => setTimeout(r, 5))
  }
}

/**
 * How long after now a change holds for every request: a request is sent every 5 ms, without
 * waiting for the answers before it (a replica under load answers each one late, and that
 * lateness is not the change's), until the first that holds is 100 ms old; resolves with when
 * the first request was sent from which on every answer held. Throws after `timeoutMs`.
 */
export async function heldFrom(timeoutMs: number, ok: () => Promise<boolean>): Promise<number> {
  const t0 = performance.now()
  const sent: { at: number; held?: boolean; answered: Promise<void> }[] = []
  let firstHeld = Infinity
  for (;;) {
    const at = performance.now() - t0
    if (at > firstHeld + 100) break
    if (at > timeoutMs) throw new Error(`not within ${timeoutMs} ms`)
    const s: (typeof sent)[number] = { at, answered: Promise.resolve() }
    s.answered = ok().then(
      (held) => {
        s.held = held
        if (held) firstHeld = Math.min(firstHeld, s.at)
      },
      () => void (s.held = false),
    )
    sent.push(s)
    await new Promise((r) => setTimeout(r, 5))
  }
  await Promise.all(sent.map((s) => s.answered))
  let from = sent.length
  while (from > 0 && sent[from - 1].held) from--
  if (from === sent.length) throw new Error('the last request did not hold')
  return sent[from].at
}
