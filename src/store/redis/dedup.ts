import type { Redis } from 'ioredis'
import type { Database } from 'lmdb'
import type { Logger } from 'pino'
import type { Counter } from 'prom-client'
import { conflict } from '../../core/errors.js'
import type { UsageKind, UsageRecord } from '../../model/usage-record.js'
import type { KeyClaim, SharedDedup, StoredResponse, TransactionClaim } from '../../ports/dedup.js'
import type { Store } from '../store.js'
import { neverSent, sleep, waitAtMost, type Outage } from './connection.js'

/** SET NX PX; when taken, the holder's value. KEYS: the entry. ARGV: value, ttl (ms). */
const CLAIM = `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
return redis.call('GET', KEYS[1])
`
/** Replaces the entry when it still holds this claim. KEYS: the entry. ARGV: claim, final value, ttl (ms). */
const COMMIT = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
`
/**
 * A noted record's claim becomes its dedup entry when it is still its claim or gone (expired);
 * returns the value found otherwise (the entry of a twin stored by another replica, or its claim).
 * KEYS: the entry. ARGV: claim, final value, ttl (ms).
 */
const SETTLE = `
local v = redis.call('GET', KEYS[1])
if v == false or v == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return '' end
return v
`
/** Deletes the entry when it still holds this claim. */
const RELEASE = `
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
`

type Scripted = Redis & {
  meterdClaim(key: string, value: string, ttlMs: number): Promise<string | null>
  meterdCommit(key: string, claim: string, value: string, ttlMs: number): Promise<number>
  meterdRelease(key: string, claim: string): Promise<number>
  meterdSettle(key: string, claim: string, value: string, ttlMs: number): Promise<string>
}

/** A committed record whose claim is not yet known to be its dedup entry: record id → this. */
interface Noted {
  team: string
  kind: UsageKind
  tx: string
  /** The dedup window (the entry's ttl). */
  w: number
  at: number
}

/** How often noted claims left over are settled. */
const SETTLE_EVERY_MS = 1000
/** How long notes settled by their own request wait to be taken off together. */
const FLUSH_AFTER_MS = 50

/** How often a request waiting for another replica's claim looks again. */
const POLL_MS = 20

/** How often a release Redis did not answer is sent again (until the claim would have expired). */
const RELEASE_RETRY_MS = 100

/**
 * Dedup entries in Redis. A transactionId's entry is `p:<id>` while the replica that claimed it
 * stores the record (expiring after claim_ttl, so a replica that dies mid-request blocks retries
 * that long at most), then `d:<id>` for the dedup window. An Idempotency-Key's entry is the
 * pending claim `{o, h}`, then the stored answer `{h, s, b}` for the key's ttl.
 */
export class RedisDedup implements SharedDedup {
  private readonly redis: Scripted
  /** Records committed whose claim is not yet their dedup entry (LMDB, written in their write unit). */
  private readonly noted: Database<Noted, string>
  private settler?: NodeJS.Timeout
  private settling = false
  /** Notes whose claims this process turned into entries: taken off in one transaction, a few ms later. */
  private done: string[] = []
  private flushTimer?: NodeJS.Timeout
  /** Releases of claims Redis did not answer yet (tried again until it does, or the claim expired). */
  private readonly unreleased = new Set<() => Promise<unknown>>()

  constructor(
    redis: Redis,
    private readonly prefix: string,
    private readonly claimTtlMs: number,
    private readonly outage: Outage,
    store: Store,
    private readonly logger: Logger,
    private readonly twins: Pick<Counter, 'inc'>,
  ) {
    this.redis = redis as Scripted
    this.noted = store.db<string, Noted>('shared-dedup-noted')
    if (!('meterdClaim' in redis)) {
      redis.defineCommand('meterdClaim', { numberOfKeys: 1, lua: CLAIM })
      redis.defineCommand('meterdCommit', { numberOfKeys: 1, lua: COMMIT })
      redis.defineCommand('meterdRelease', { numberOfKeys: 1, lua: RELEASE })
      redis.defineCommand('meterdSettle', { numberOfKeys: 1, lua: SETTLE })
    }
  }

  noteInTransaction(records: UsageRecord[], windowMs: number, skip: ReadonlyMap<string, string>): void {
    if (windowMs <= 0) return
    const at = Date.now()
    for (const r of records) {
      const tx = r.body.transactionId
      if (typeof tx !== 'string' || tx === '' || skip.has(r.id)) continue
      this.noted.put(r.id, { team: r.caller.team, kind: r.kind, tx, w: windowMs, at })
    }
  }

  settleNoted(): void {
    if (this.settler) return
    void this.settle(0)
    this.settler = setInterval(() => void this.settle(SETTLE_EVERY_MS), SETTLE_EVERY_MS)
    this.settler.unref()
  }

  close(): void {
    if (this.settler) clearInterval(this.settler)
    this.unreleased.clear()
    this.flush()
  }

  /** Takes the settled notes off, one transaction for all of them. */
  private flush(): void {
    if (this.flushTimer) clearTimeout(this.flushTimer)
    this.flushTimer = undefined
    if (this.done.length === 0) return
    const ids = this.done
    this.done = []
    this.noted.transaction(() => ids.forEach((id) => this.noted.remove(id))).catch(() => undefined) // left over: settled again later, a no-op
  }

  /** Settles the noted claims older than `minAgeMs` (younger ones are being settled by their request). */
  private async settle(minAgeMs: number): Promise<void> {
    if (this.settling) return
    this.settling = true
    try {
      const now = Date.now()
      const due: [string, Noted][] = []
      for (const { key, value } of this.noted.getRange({})) if (now - value.at >= minAgeMs) due.push([key, value])
      if (due.length === 0) return
      // The settles sent together (pipelined on the connection), then one transaction taking them off the notes.
      const outcomes = await Promise.allSettled(due.map(([id, n]) => this.redis.meterdSettle(this.txKey(n.team, n.kind, n.tx), `p:${id}`, `d:${id}`, n.w)))
      const settled: string[] = []
      outcomes.forEach((o, i) => {
        const [id, n] = due[i]
        if (o.status === 'rejected') return this.outage.failed(o.reason) // Redis is away: the next round
        settled.push(id)
        if (o.value !== '' && o.value !== `d:${id}`) {
          // The claim expired before it could be settled and a retry stored the record again elsewhere.
          this.twins.inc()
          this.logger.warn({ id, other: o.value.slice(2), transactionId: n.tx }, 'a record committed here whose answer was lost was stored again by another replica (its claim had expired)')
        }
      })
      if (settled.length === due.length) this.outage.recovered()
      if (settled.length) await this.noted.transaction(() => settled.forEach((id) => this.noted.remove(id)))
    } catch (err) {
      this.logger.warn({ err }, 'settling noted dedup claims failed; trying again')
    } finally {
      this.settling = false
    }
  }

  private txKey(team: string, kind: UsageKind, tx: string): string {
    return `${this.prefix}tx:${team}\0${kind}\0${tx}`
  }

  async claimTransaction(team: string, kind: UsageKind, tx: string, id: string, windowMs: number): Promise<TransactionClaim> {
    const key = this.txKey(team, kind, tx)
    const until = Date.now() + this.claimTtlMs + 1000
    const release = () => this.redis.meterdRelease(key, `p:${id}`)
    for (;;) {
      const held = await this.claim(() => this.redis.meterdClaim(key, `p:${id}`, Math.min(this.claimTtlMs, windowMs)), release)
      if (held === null) return { claimed: true }
      if (held.startsWith('d:')) return { claimed: false, id: held.slice(2) }
      // Another replica is storing it: its outcome decides (its id, or the claim is free again).
      if (Date.now() > until) throw conflict('transaction_in_progress', 'a record with this transactionId is still being stored by another replica', { 'retry-after': '1' })
      await sleep(POLL_MS)
    }
  }

  async commitTransaction(team: string, kind: UsageKind, tx: string, id: string, windowMs: number): Promise<void> {
    await this.outage.guard(() => this.redis.meterdCommit(this.txKey(team, kind, tx), `p:${id}`, `d:${id}`, windowMs))
    // Settled: no longer noted.
    this.done.push(id)
    this.flushTimer ??= setTimeout(() => this.flush(), FLUSH_AFTER_MS)
  }

  async releaseTransaction(team: string, kind: UsageKind, tx: string, id: string): Promise<void> {
    const key = this.txKey(team, kind, tx)
    await this.release(() => this.redis.meterdRelease(key, `p:${id}`))
  }

  /**
   * Takes a claim (SET NX). When its answer is lost (Redis slow rather than down), the claim may
   * still be set once Redis gets to it: it is released then, so that the client's retry is served
   * at once instead of waiting out claim_ttl_seconds behind a claim nobody holds.
   */
  private claim<T>(call: () => Promise<T>, release: () => Promise<unknown>): Promise<T> {
    return this.outage.guard(() =>
      call().catch((err) => {
        if (!neverSent(err)) this.release(release).catch(() => undefined)
        throw err
      }),
    )
  }

  /**
   * Releases a claim (the scripts delete the entry only while it holds this request's claim).
   * When Redis does not answer, the release is sent again every RELEASE_RETRY_MS until it does or
   * the claim has expired; the first one, sent right behind the claim on the connection, runs as
   * soon as Redis gets to them.
   */
  private async release(release: () => Promise<unknown>): Promise<void> {
    const until = Date.now() + this.claimTtlMs
    this.unreleased.add(release)
    const released = (): void => void this.unreleased.delete(release)
    const again = (): void => {
      // Expired (nothing left to release), or closed: no more tries.
      if (Date.now() > until || !this.unreleased.has(release)) return released()
      setTimeout(() => release().then(released, again), RELEASE_RETRY_MS).unref()
    }
    await this.outage.guard(() =>
      release().then(released, (err) => {
        again()
        throw err
      }),
    )
  }

  /**
   * On stop: sends the releases Redis did not answer yet again, every RELEASE_RETRY_MS, until all
   * are answered or `until` (ms since the epoch) has passed. Resolves with how many are left: those
   * claims block the client's retry until they expire (claim_ttl_seconds).
   */
  async releasePending(until: number): Promise<number> {
    while (this.unreleased.size && Date.now() < until) {
      const round = Promise.all([...this.unreleased].map((release) => release().then(() => this.unreleased.delete(release), () => undefined)))
      await waitAtMost(round, until - Date.now())
      if (this.unreleased.size && Date.now() < until) await sleep(Math.min(RELEASE_RETRY_MS, until - Date.now()))
    }
    return this.unreleased.size
  }

  private idemKey(team: string, key: string): string {
    return `${this.prefix}idem:${team}\0${key}`
  }

  async claimKey(team: string, key: string, bodyHash: string, owner: string): Promise<KeyClaim> {
    const k = this.idemKey(team, key)
    const held = await this.claim(() => this.redis.meterdClaim(k, pending(bodyHash, owner), this.claimTtlMs), () => this.releaseOwned(k, owner))
    if (held === null) return { claimed: true }
    const v = JSON.parse(held) as { h: string; s?: number; b?: string }
    const response: StoredResponse | undefined = v.s === undefined ? undefined : { status: v.s, body: v.b ?? '' }
    return { claimed: false, bodyHash: v.h, response }
  }

  async commitKey(team: string, key: string, bodyHash: string, owner: string, response: StoredResponse, ttlMs: number): Promise<void> {
    const value = JSON.stringify({ h: bodyHash, s: response.status, b: response.body })
    await this.outage.guard(() => this.redis.meterdCommit(this.idemKey(team, key), pending(bodyHash, owner), value, ttlMs))
  }

  async releaseKey(team: string, key: string, owner: string): Promise<void> {
    const k = this.idemKey(team, key)
    await this.release(() => this.releaseOwned(k, owner))
  }

  /** The claim's value holds the body hash too; match on the owner alone. */
  private async releaseOwned(k: string, owner: string): Promise<void> {
    const held = await this.redis.get(k)
    if (held !== null && (JSON.parse(held) as { o?: string }).o === owner) await this.redis.meterdRelease(k, held)
  }
}

const pending = (bodyHash: string, owner: string): string => JSON.stringify({ o: owner, h: bodyHash })
