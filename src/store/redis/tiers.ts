import type { Redis } from 'ioredis'
import { EMPTY_AGGREGATE, distinctToken, moveAggregate, moveDistinct, type Aggregate, type Move } from '../../domain/pricing/aggregates.js'
import { dec } from '../../domain/pricing/money.js'
import type { PricingElement } from '../../model/pricing-element.js'
import type { Applied, Counted, SharedTierQuantities, ToolCharge } from '../../ports/tiers.js'
import type { Outage } from './connection.js'

/**
 * An aggregate and whether a DISTINCT value is in its set, read together.
 * KEYS: aggregate hash, distinct set. ARGV: token ('' when none). Returns {version, aggregate json, member}.
 */
const READ = `
local v = redis.call('HMGET', KEYS[1], 'v', 'a')
local m = 0
if ARGV[1] ~= '' then m = redis.call('SISMEMBER', KEYS[2], ARGV[1]) end
return {tonumber(v[1] or '0'), v[2] or '', m}
`
/**
 * Compare-and-set: the aggregate moves only if nobody moved it since it was read (same version);
 * a DISTINCT value joins the set in the same step. KEYS as READ. ARGV: version read, new aggregate
 * json, token, ttl (ms). Returns 1 when set, 0 when another replica got there first.
 */
const CAS = `
if tonumber(redis.call('HGET', KEYS[1], 'v') or '0') ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'v', tonumber(ARGV[1]) + 1, 'a', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if ARGV[3] ~= '' then
  redis.call('SADD', KEYS[2], ARGV[3])
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
return 1
`

/**
 * A give-back: the aggregate is set only if nobody moved it since it was read (same version), and
 * DISTINCT values leave the set in the same step. KEYS as READ. ARGV: version read, aggregate
 * json, ttl (ms), tokens to remove… Returns 1 when set, 0 when another replica got there first.
 */
const GIVE_BACK = `
if tonumber(redis.call('HGET', KEYS[1], 'v') or '0') ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'v', tonumber(ARGV[1]) + 1, 'a', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
for i = 4, #ARGV do redis.call('SREM', KEYS[2], ARGV[i]) end
return 1
`

type Scripted = Redis & {
  meterdAggRead(agg: string, set: string, token: string): Promise<[number, string, number]>
  meterdAggCas(agg: string, set: string, version: number, aggregate: string, token: string, ttlMs: number): Promise<number>
  meterdAggGiveBack(agg: string, set: string, version: number, aggregate: string, ttlMs: number, ...tokens: string[]): Promise<number>
}

/** One element's move by one event, as set in Redis: what giving it back needs. */
interface Moved extends Move {
  key: string
  /** The index of the charge that made it, in its count() call. */
  charge: number
  before: Aggregate
  /** The aggregate's version this move set. */
  version: number
  /** The DISTINCT value this move added to the set ('' when none). */
  added: string
}

/** Aggregates outlive the longest billing period (a year) and then go. */
const TTL_MS = 400 * 86_400_000

/**
 * Tool-pricing aggregates in Redis, shared by every replica. Each element's aggregate is a hash
 * {v: version, a: the Aggregate as JSON, exact decimal strings}; an event reads it, computes the
 * move with the same code as the LMDB aggregates (moveAggregate: BigInt, else Decimal) and sets
 * it only if the version did not change, else reads again. Within a replica the moves of one
 * aggregate are queued, so only replicas race and a retry is rare. (An INCRBY on integer-scaled
 * quantities would overflow 64 bits at 9.2 million units with 12 decimal places, and could not
 * move a MAXIMUM or AVERAGE.)
 */
export class RedisTierQuantities implements SharedTierQuantities {
  private readonly redis: Scripted
  /** aggregate key → the tail of this replica's queue of moves on it. */
  private readonly tails = new Map<string, Promise<unknown>>()

  constructor(redis: Redis, private readonly prefix: string, private readonly outage: Outage) {
    this.redis = redis as Scripted
    redis.defineCommand('meterdAggRead', { numberOfKeys: 2, lua: READ })
    redis.defineCommand('meterdAggCas', { numberOfKeys: 2, lua: CAS })
    redis.defineCommand('meterdAggGiveBack', { numberOfKeys: 2, lua: GIVE_BACK })
  }

  async apply(charges: ToolCharge[], now: number): Promise<Applied[]> {
    return (await this.count(charges, now)).applied
  }

  async count(charges: ToolCharge[], _now: number): Promise<Counted> {
    // Every move that was set, in the order it was set (a charge that fails midway has moved some).
    const moved: Moved[] = []
    const outcomes = await Promise.allSettled(
      charges.map(async (c, i) => {
        const applied: Applied = { parts: {}, quantities: {} }
        for (const el of c.elements) {
          const m = await this.queued(JSON.stringify([...c.scope, el.name]), (key) => this.move(key, el, c.usageMetadata?.[el.name], i))
          moved.push(m)
          applied.parts[el.name] = m.step.part
          applied.quantities[el.name] = m.step.quantity
        }
        return applied
      }),
    )
    const giveBack = (only?: readonly number[]) => this.giveBack(moved, only)
    const failed = outcomes.find((o): o is PromiseRejectedResult => o.status === 'rejected')
    if (failed) {
      await giveBack().catch(() => undefined)
      throw failed.reason
    }
    return { applied: outcomes.map((o) => (o as PromiseFulfilledResult<Applied>).value), giveBack }
  }

  /**
   * Takes a request's moves back (those of the charges `only` names, else all), per aggregate,
   * queued behind this replica's later moves of it. Each move goes back once.
   */
  private async giveBack(moved: Moved[], only?: readonly number[]): Promise<void> {
    const byKey = new Map<string, Moved[]>()
    const staying: Moved[] = []
    for (const m of moved) {
      if (only && !only.includes(m.charge)) {
        staying.push(m)
        continue
      }
      const list = byKey.get(m.key)
      if (list) list.push(m)
      else byKey.set(m.key, [m])
    }
    moved.length = 0 // once
    moved.push(...staying)
    await Promise.all([...byKey].map(([key, moves]) => this.queued(key, () => this.unmove(key, moves))))
  }

  private async unmove(key: string, moves: Moved[]): Promise<void> {
    const agg = `${this.prefix}agg:${key}`
    const set = `${this.prefix}aggd:${key}`
    const first = moves[0]
    const last = moves[moves.length - 1]
    const added = moves.map((m) => m.added).filter((t) => t !== '')
    await this.outage.guard(async () => {
      for (;;) {
        const [version, json] = await this.redis.meterdAggRead(agg, set, '')
        // Nobody moved it since, nor between these moves (their versions follow on; a move of
        // the request that stays, or another replica's, would sit between): back to where this
        // request found it, exactly.
        if (version === last.version && last.version - first.version === moves.length - 1) {
          if ((await this.redis.meterdAggGiveBack(agg, set, version, JSON.stringify(first.before), TTL_MS, ...added)) === 1) return
          continue
        }
        // Others moved it since (they were priced with these moves counted): this request's own
        // contribution goes; a maximum or a DISTINCT value others may have been priced against stays.
        const now: Aggregate = json === '' ? EMPTY_AGGREGATE : JSON.parse(json)
        let sum = dec(now.sum)
        let nv = now.nv
        for (const m of moves) {
          sum = sum.minus(dec(m.after.sum).minus(m.before.sum))
          nv -= m.after.nv - m.before.nv
        }
        const back: Aggregate = { ...now, n: now.n - moves.length, nv, sum: sum.toFixed() }
        if ((await this.redis.meterdAggGiveBack(agg, set, version, JSON.stringify(back), TTL_MS)) === 1) return
      }
    })
  }

  /** Runs `fn` after this replica's earlier moves of the same aggregate. */
  private queued<T>(key: string, fn: (key: string) => Promise<T>): Promise<T> {
    const prev = this.tails.get(key) ?? Promise.resolve()
    const run = prev.then(
      () => fn(key),
      () => fn(key),
    )
    const tail = run.then(
      () => undefined,
      () => undefined,
    )
    this.tails.set(key, tail)
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key)
    })
    return run
  }

  private async move(key: string, el: PricingElement, raw: unknown, charge: number): Promise<Moved> {
    const agg = `${this.prefix}agg:${key}`
    const set = `${this.prefix}aggd:${key}`
    const token = el.aggregationType === 'DISTINCT' && raw !== undefined && raw !== null ? distinctToken(raw) : ''
    return this.outage.guard(async () => {
      for (;;) {
        const [version, json, member] = await this.redis.meterdAggRead(agg, set, token)
        const before: Aggregate = json === '' ? EMPTY_AGGREGATE : JSON.parse(json)
        const fresh = token !== '' && member === 0
        const m = el.aggregationType === 'DISTINCT' ? moveDistinct(el, before, fresh) : moveAggregate(el, before, raw)
        if ((await this.redis.meterdAggCas(agg, set, version, JSON.stringify(m.after), token, TTL_MS)) === 1)
          return { ...m, key, charge, before, version: version + 1, added: fresh ? token : '' }
      }
    })
  }
}
