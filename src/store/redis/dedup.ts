import type { Redis } from 'ioredis'
import type { StoredResponse } from '../../core/consumer.js'
import { conflict } from '../../core/errors.js'
import type { UsageKind } from '../../model/usage-record.js'
import type { KeyClaim, SharedDedup, TransactionClaim } from '../../ports/dedup.js'
import { sleep, type Outage } from './connection.js'

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
/** Deletes the entry when it still holds this claim. */
const RELEASE = `
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
`

type Scripted = Redis & {
  meterdClaim(key: string, value: string, ttlMs: number): Promise<string | null>
  meterdCommit(key: string, claim: string, value: string, ttlMs: number): Promise<number>
  meterdRelease(key: string, claim: string): Promise<number>
}

/** How often a request waiting for another replica's claim looks again. */
const POLL_MS = 20

/**
 * Dedup entries in Redis. A transactionId's entry is `p:<id>` while the replica that claimed it
 * stores the record (expiring after claim_ttl, so a replica that dies mid-request blocks retries
 * that long at most), then `d:<id>` for the dedup window. An Idempotency-Key's entry is the
 * pending claim `{o, h}`, then the stored answer `{h, s, b}` for the key's ttl.
 */
export class RedisDedup implements SharedDedup {
  private readonly redis: Scripted

  constructor(redis: Redis, private readonly prefix: string, private readonly claimTtlMs: number, private readonly outage: Outage) {
    this.redis = redis as Scripted
    if (!('meterdClaim' in redis)) {
      redis.defineCommand('meterdClaim', { numberOfKeys: 1, lua: CLAIM })
      redis.defineCommand('meterdCommit', { numberOfKeys: 1, lua: COMMIT })
      redis.defineCommand('meterdRelease', { numberOfKeys: 1, lua: RELEASE })
    }
  }

  private txKey(team: string, kind: UsageKind, tx: string): string {
    return `${this.prefix}tx:${team}\0${kind}\0${tx}`
  }

  async claimTransaction(team: string, kind: UsageKind, tx: string, id: string, windowMs: number): Promise<TransactionClaim> {
    const key = this.txKey(team, kind, tx)
    const until = Date.now() + this.claimTtlMs + 1000
    for (;;) {
      const held = await this.outage.guard(() => this.redis.meterdClaim(key, `p:${id}`, Math.min(this.claimTtlMs, windowMs)))
      if (held === null) return { claimed: true }
      if (held.startsWith('d:')) return { claimed: false, id: held.slice(2) }
      // Another replica is storing it: its outcome decides (its id, or the claim is free again).
      if (Date.now() > until) throw conflict('transaction_in_progress', 'a record with this transactionId is still being stored by another replica', { 'retry-after': '1' })
      await sleep(POLL_MS)
    }
  }

  async commitTransaction(team: string, kind: UsageKind, tx: string, id: string, windowMs: number): Promise<void> {
    await this.outage.guard(() => this.redis.meterdCommit(this.txKey(team, kind, tx), `p:${id}`, `d:${id}`, windowMs))
  }

  async releaseTransaction(team: string, kind: UsageKind, tx: string, id: string): Promise<void> {
    await this.outage.guard(() => this.redis.meterdRelease(this.txKey(team, kind, tx), `p:${id}`))
  }

  private idemKey(team: string, key: string): string {
    return `${this.prefix}idem:${team}\0${key}`
  }

  async claimKey(team: string, key: string, bodyHash: string, owner: string): Promise<KeyClaim> {
    const held = await this.outage.guard(() => this.redis.meterdClaim(this.idemKey(team, key), pending(bodyHash, owner), this.claimTtlMs))
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
    // The claim's value holds the body hash too; match on the owner alone.
    await this.outage.guard(async () => {
      const k = this.idemKey(team, key)
      const held = await this.redis.get(k)
      if (held !== null && (JSON.parse(held) as { o?: string }).o === owner) await this.redis.meterdRelease(k, held)
    })
  }
}

const pending = (bodyHash: string, owner: string): string => JSON.stringify({ o: owner, h: bodyHash })
