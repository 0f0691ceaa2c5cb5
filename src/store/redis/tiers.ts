import { randomBytes } from 'node:crypto'
import type { Redis } from 'ioredis'
import { EMPTY_AGGREGATE, distinctToken, moveAggregate, moveDistinct, type Aggregate, type Move } from '../../domain/pricing/aggregates.js'
import { dec } from '../../domain/pricing/money.js'
import type { PricingElement } from '../../model/pricing-element.js'
import type { Applied, Counted, SharedTierQuantities, ToolCharge } from '../../ports/tiers.js'
import { neverSent, sleep, waitAtMost, type Outage } from './connection.js'

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
 * a DISTINCT value joins the set in the same step, and the move's mark is set ('1'), so that
 * whether it ran can be read when its reply is lost. KEYS: as READ, then the mark. ARGV: version
 * read, new aggregate json, token, ttl (ms), the mark's ttl (ms). Returns 1 when set, 0 when
 * another replica got there first.
 */
const CAS = `
if tonumber(redis.call('HGET', KEYS[1], 'v') or '0') ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'v', tonumber(ARGV[1]) + 1, 'a', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if ARGV[3] ~= '' then
  redis.call('SADD', KEYS[2], ARGV[3])
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
redis.call('SET', KEYS[3], '1', 'PX', ARGV[5])
return 1
`

/**
 * A give-back: the aggregate is set only if nobody moved it since it was read (same version), and
 * DISTINCT values leave the set in the same step; the moves' marks become '0' (given back), so
 * that a give-back whose reply was lost is not made twice. KEYS: as READ, then the moves' marks.
 * ARGV: version read, aggregate json, ttl (ms), the marks' ttl (ms), tokens to remove…
 * Returns 1 when set, 0 when another replica got there first.
 */
const GIVE_BACK = `
if tonumber(redis.call('HGET', KEYS[1], 'v') or '0') ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'v', tonumber(ARGV[1]) + 1, 'a', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
for i = 5, #ARGV do redis.call('SREM', KEYS[2], ARGV[i]) end
for i = 3, #KEYS do redis.call('SET', KEYS[i], '0', 'PX', ARGV[4]) end
return 1
`

type Scripted = Redis & {
  meterdAggRead(agg: string, set: string, token: string): Promise<[number, string, number]>
  meterdAggCas(agg: string, set: string, mark: string, version: number, aggregate: string, token: string, ttlMs: number, markTtlMs: number): Promise<number>
  /** Its keys are counted: 2 + the marks. */
  meterdAggGiveBack(numberOfKeys: number, ...keysThenArgs: (string | number)[]): Promise<number>
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
  /** Its mark in Redis: '1' once the move is set, '0' once it is given back. */
  mark: string
  /**
   * Whether it stands is read from its mark before it is given back: the answer to the move was
   * lost ('move': it may never have been made), or that to a give-back of it ('give-back').
   */
  unsure?: 'move' | 'give-back'
  /** Found never set: nothing to give back. */
  gone?: boolean
}

/** Aggregates outlive the longest billing period (a year) and then go. */
const TTL_MS = 400 * 86_400_000
/**
 * How long a move's mark lasts. A lost reply's mark is read by a command sent right behind the
 * move on the same connection, so it runs right after the move whenever Redis gets to them; only
 * a reconnection in between can make the read come later than this.
 */
const MARK_TTL_MS = 60_000
/** How often give-backs Redis did not answer are tried again. */
const OWED_RETRY_MS = 200

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
  /**
   * aggregate key → moves of failed requests not given back yet because Redis did not answer (or
   * whose own reply was lost): given back before this replica's next move of the aggregate, and
   * every OWED_RETRY_MS meanwhile.
   */
  private readonly owed = new Map<string, Moved[]>()
  /** aggregate key → owed moves being given back right now (out of `owed` meanwhile). */
  private readonly giving = new Map<string, Moved[]>()
  private retry?: NodeJS.Timeout
  /** Past giveBackOwed: nothing is tried again (the connection closes). */
  private stopped = false
  /** Marks are this replica's prefix and a sequence number. */
  private readonly markPrefix: string
  private marks = 0

  constructor(redis: Redis, private readonly prefix: string, private readonly outage: Outage) {
    this.redis = redis as Scripted
    redis.defineCommand('meterdAggRead', { numberOfKeys: 2, lua: READ })
    redis.defineCommand('meterdAggCas', { numberOfKeys: 3, lua: CAS })
    redis.defineCommand('meterdAggGiveBack', { lua: GIVE_BACK })
    this.markPrefix = `${prefix}aggm:${randomBytes(9).toString('base64url')}:`
  }

  async apply(charges: ToolCharge[], now: number): Promise<Applied[]> {
    return (await this.count(charges, now)).applied
  }

  async count(charges: ToolCharge[], _now: number): Promise<Counted> {
    // Every move that was set (or may have been: its answer was lost), in the order it was set (a
    // charge that fails midway has moved some).
    const moved: Moved[] = []
    const outcomes = await Promise.allSettled(
      charges.map(async (c, i) => {
        const applied: Applied = { parts: {}, quantities: {} }
        for (const el of c.elements) {
          const m = await this.queued(JSON.stringify([...c.scope, el.name]), (key) => this.move(key, el, c.usageMetadata?.[el.name], i, moved))
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
   * queued behind this replica's later moves of it. Each move goes back once. When Redis does not
   * answer, the moves are owed: given back once it does (and rejects with the 503).
   */
  private async giveBack(moved: Moved[], only?: readonly number[]): Promise<void> {
    const keys = new Set<string>()
    const staying: Moved[] = []
    for (const m of moved) {
      if (only && !only.includes(m.charge)) {
        staying.push(m)
        continue
      }
      const list = this.owed.get(m.key)
      if (list) list.push(m)
      else this.owed.set(m.key, [m])
      keys.add(m.key)
    }
    moved.length = 0 // once
    moved.push(...staying)
    await Promise.all([...keys].map((key) => this.queued(key, () => this.settle(key))))
  }

  /** Gives the aggregate's owed moves back; those Redis does not take stay owed, and are tried again soon. */
  private async settle(key: string): Promise<void> {
    const moves = this.owed.get(key)
    if (!moves) return
    this.owed.delete(key)
    this.giving.set(key, moves)
    try {
      await this.unmove(key, moves)
    } catch (err) {
      const left = moves.filter((m) => !m.gone)
      for (const m of left) m.unsure ??= 'give-back' // its give-back may have been sent, and run
      const later = this.owed.get(key)
      if (left.length || later) this.owed.set(key, later ? [...left, ...later] : left)
      this.retrySoon()
      throw err
    } finally {
      this.giving.delete(key)
    }
  }

  /**
   * On stop: gives back what this replica owes, tried again every OWED_RETRY_MS, until nothing is
   * owed or `until` (ms since the epoch) has passed. Resolves with how many moves are still owed
   * (their give-back unanswered, or not made). No retry is scheduled after it.
   */
  async giveBackOwed(until: number): Promise<number> {
    while ((this.owed.size || this.giving.size) && Date.now() < until) {
      // Behind a give-back under way (the retry's), if any.
      const keys = new Set([...this.owed.keys(), ...this.giving.keys()])
      const round = Promise.all([...keys].map((key) => this.queued(key, () => this.settle(key)).catch(() => undefined)))
      await waitAtMost(round, until - Date.now())
      if ((this.owed.size || this.giving.size) && Date.now() < until) await sleep(Math.min(OWED_RETRY_MS, until - Date.now()))
    }
    this.stopped = true
    if (this.retry) clearTimeout(this.retry)
    this.retry = undefined
    let left = 0
    for (const moves of [...this.owed.values(), ...this.giving.values()]) left += moves.filter((m) => !m.gone).length
    return left
  }

  private retrySoon(): void {
    if (this.retry || this.stopped) return
    this.retry = setTimeout(() => {
      this.retry = undefined
      for (const key of [...this.owed.keys()]) this.queued(key, () => this.settle(key)).catch(() => undefined)
    }, OWED_RETRY_MS)
    this.retry.unref()
  }

  private async unmove(key: string, owed: Moved[]): Promise<void> {
    const agg = `${this.prefix}agg:${key}`
    const set = `${this.prefix}aggd:${key}`
    await this.outage.guard(async () => {
      // Moves whose (or whose give-back's) answer was lost: their marks, read behind them on the
      // connection, say whether they stand ('1'), were given back ('0'), or were never made (none).
      const unsure = owed.filter((m) => m.unsure)
      if (unsure.length) {
        const marks = await this.redis.mget(unsure.map((m) => m.mark))
        unsure.forEach((m, i) => {
          if (marks[i] === '0' || (marks[i] === null && m.unsure === 'move')) m.gone = true
          m.unsure = undefined
        })
      }
      const moves = owed.filter((m) => !m.gone).sort((a, b) => a.version - b.version)
      if (moves.length === 0) return
      const first = moves[0]
      const last = moves[moves.length - 1]
      const added = moves.map((m) => m.added).filter((t) => t !== '')
      const marks = moves.map((m) => m.mark)
      const giveBack = (version: number, to: Aggregate, tokens: string[]) =>
        this.redis.meterdAggGiveBack(2 + marks.length, agg, set, ...marks, version, JSON.stringify(to), TTL_MS, MARK_TTL_MS, ...tokens)
      for (;;) {
        const [version, json] = await this.redis.meterdAggRead(agg, set, '')
        // Nobody moved it since, nor between these moves (their versions follow on; a move of
        // the request that stays, or another replica's, would sit between): back to where this
        // request found it, exactly.
        if (version === last.version && last.version - first.version === moves.length - 1) {
          if ((await giveBack(version, first.before, added)) === 1) return
          continue
        }
        // Others moved it since (they were priced with these moves counted): this request's own
        // contribution goes; a maximum or a DISTINCT value others may have been priced against stays.
        const now: Aggregate = json === '' ? EMPTY_AGGREGATE : JSON.parse(json)
        // Not the aggregate they moved (it expired, or Redis lost it): nothing of theirs to take.
        if (now.n < moves.length) return
        let sum = dec(now.sum)
        let nv = now.nv
        for (const m of moves) {
          sum = sum.minus(dec(m.after.sum).minus(m.before.sum))
          nv -= m.after.nv - m.before.nv
        }
        const back: Aggregate = { ...now, n: now.n - moves.length, nv, sum: sum.toFixed() }
        if ((await giveBack(version, back, [])) === 1) return
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

  /**
   * Moves one element's aggregate and adds the move to `moved`, this replica's earlier owed moves
   * of it given back first. A move whose reply is lost is added as unsure: its request fails and
   * gives it back if Redis set it.
   */
  private async move(key: string, el: PricingElement, raw: unknown, charge: number, moved: Moved[]): Promise<Moved> {
    if (this.owed.has(key)) await this.settle(key)
    const agg = `${this.prefix}agg:${key}`
    const set = `${this.prefix}aggd:${key}`
    const token = el.aggregationType === 'DISTINCT' && raw !== undefined && raw !== null ? distinctToken(raw) : ''
    const mark = this.markPrefix + (++this.marks).toString(36)
    return this.outage.guard(async () => {
      for (;;) {
        const [version, json, member] = await this.redis.meterdAggRead(agg, set, token)
        const before: Aggregate = json === '' ? EMPTY_AGGREGATE : JSON.parse(json)
        const fresh = token !== '' && member === 0
        const step = el.aggregationType === 'DISTINCT' ? moveDistinct(el, before, fresh) : moveAggregate(el, before, raw)
        const m: Moved = { ...step, key, charge, before, version: version + 1, added: fresh ? token : '', mark }
        let set1: number
        try {
          set1 = await this.redis.meterdAggCas(agg, set, mark, version, JSON.stringify(step.after), token, TTL_MS, MARK_TTL_MS)
        } catch (err) {
          // Sent, unanswered: Redis may still run it (slow rather than down).
          if (!neverSent(err)) {
            m.unsure = 'move'
            moved.push(m)
          }
          throw err
        }
        if (set1 === 1) {
          moved.push(m)
          return m
        }
      }
    })
  }
}
