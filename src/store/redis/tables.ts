import { randomUUID } from 'node:crypto'
import type { Redis } from 'ioredis'
import type { Logger } from 'pino'
import type { Replaced, RowChange, RowsReplaced, SharedTable, SharedTables, TeamLimit } from '../../ports/tables.js'
import type { Store } from '../store.js'
import type { Outage } from './connection.js'

/** A removed row: kept in Redis so a replica that missed the message removes it at its resync. */
const TOMBSTONE = 'null'

/** Buffers (sealed signing secrets) survive JSON as {type: 'Buffer', data}. */
const revive = (_k: string, v: any): unknown => (v && v.type === 'Buffer' && Array.isArray(v.data) ? Buffer.from(v.data) : v)

/**
 * The conditional replacement of rows (RedisTables.replaceRows): KEYS each row's table hash, the
 * changes channel, then (with a limit) the team's set; ARGV the number of rows, the limit ('' for
 * none) and the team, then per row its field, the row as the replica read it and the new row
 * (`null` for none), then the messages. The rows are written (and the messages published, as by
 * wrote()) only when every hash still holds the row read, or no row yet (one this replica made
 * while Redis was down, not pushed yet); otherwise nothing is written and the rows the hashes
 * hold are returned ('' for none).
 *
 * With a limit, the first row is a new one of the team, written only while the team holds fewer
 * rows than the limit (1 is returned otherwise). The team's set names its rows (fields of the
 * first hash), and '' once it was filled from the hash (a walk of the table, the first time a team
 * creates); members whose row is gone are dropped as they are counted, so a removal need not
 * touch the set, and a count walks the team's rows only.
 */
const REPLACE = `
local n, max, team = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local now, changed = {}, false
for i = 1, n do
  local row = redis.call('HGET', KEYS[i], ARGV[3 * i + 1])
  if row and row ~= ARGV[3 * i + 2] then changed = true end
  now[i] = row or ''
end
if changed then return now end
if max then
  local set = KEYS[n + 2]
  if redis.call('SADD', set, '') == 1 then
    local all = redis.call('HGETALL', KEYS[1])
    for j = 1, #all, 2 do
      local ok, row = pcall(cjson.decode, all[j + 1])
      if ok and type(row) == 'table' and row.team == team then redis.call('SADD', set, all[j]) end
    end
  end
  local held = 0
  for _, m in ipairs(redis.call('SMEMBERS', set)) do
    if m ~= '' then
      local row = redis.call('HGET', KEYS[1], m)
      if row and row ~= '${TOMBSTONE}' then held = held + 1 else redis.call('SREM', set, m) end
    end
  end
  if held >= max then return 1 end
  redis.call('SADD', set, ARGV[4])
end
for i = 1, n do
  if ARGV[3 * i + 3] ~= ARGV[3 * i + 2] then redis.call('HSET', KEYS[i], ARGV[3 * i + 1], ARGV[3 * i + 3]) end
end
for i = 3 * n + 4, #ARGV do redis.call('PUBLISH', KEYS[n + 1], ARGV[i]) end
return false
`

type Scripted = Redis & { meterdReplaceRows(numberOfKeys: number, ...args: string[]): Promise<string[] | 1 | null> }

/** A row as the Redis hash holds it: JSON, TOMBSTONE for none. */
const rowJson = (v: unknown): string => (v === undefined ? TOMBSTONE : JSON.stringify(v))

/** Whether a local row (undefined: none) is the one Redis holds as `json`. */
const same = (current: unknown, json: string): boolean => (json === TOMBSTONE ? current === undefined : current !== undefined && JSON.stringify(current) === json)

/**
 * Tables of rows (API keys, tools, export configurations, alert rules) shared through Redis and
 * mirrored into each replica's LMDB, which is what the components read (and cache), through the
 * rows of another replica not yet committed there (Store.view, src/store/table-view.ts).
 *
 * - A write commits to the local LMDB, then its rows go to a Redis hash per table
 *   (`t:<db>`: JSON key → JSON value, `null` once removed) and, in the same MULTI, a message on
 *   the `changes` channel carries them. A row whose push failed is pushed again at the next resync.
 *   A change merged over what was read (replace, replaceRows) goes the other way: to Redis
 *   first, only if the rows there are still the ones read, then to the local LMDB.
 * - Every replica subscribes: a message's rows (or, from a resync, the rows it names, read from
 *   the hash) are shown at once: held pending in the table's view, which its component reads,
 *   and `changed()` drops its caches. The local LMDB commit follows, durable, and is what a
 *   restart reads. So a change is seen by the other replicas one pub/sub message after it was
 *   made, whatever their write queue and disk flush take under load.
 * - Every resync_seconds (and at attach) each table is read whole: rows in Redis win, rows
 *   only this replica has are pushed (a change made while Redis was down).
 */
export class RedisTables implements SharedTables {
  private readonly replica = randomUUID()
  private readonly tables = new Map<string, SharedTable>()
  private readonly dirty = new Map<string, Set<string>>()
  private readonly turns = new Map<string, Promise<void>>()
  private timer?: NodeJS.Timeout
  private subscribed = false
  private closed = false

  constructor(
    private readonly redis: Redis,
    private readonly sub: Redis,
    private readonly store: Store,
    private readonly prefix: string,
    private readonly resyncMs: number,
    private readonly outage: Outage,
    private readonly logger: Logger,
  ) {}

  private hash(db: string): string {
    return `${this.prefix}t:${db}`
  }

  private get channel(): string {
    return `${this.prefix}changes`
  }

  async attach(tables: SharedTable[]): Promise<void> {
    for (const t of tables) this.tables.set(t.db, t)
    await this.subscribe()
    for (const t of tables) {
      try {
        await this.resync(t)
      } catch (err) {
        this.outage.failed(err)
      }
    }
    if (!this.timer) {
      this.timer = setInterval(() => void this.resyncAll(), this.resyncMs)
      this.timer.unref()
    }
  }

  async writable(): Promise<void> {
    await this.outage.guard(() => this.redis.ping())
  }

  async replace<V>(db: string, key: unknown, read: V, value: V): Promise<Replaced<V>> {
    const done = await this.replaceRows([{ db, key, read, value }])
    // (Never `limited`: no limit is asked.)
    if (done.outcome !== 'changed') return { outcome: 'replaced' }
    const now = done.now[0]?.value as V | undefined
    return now === undefined ? { outcome: 'gone' } : { outcome: 'changed', now }
  }

  async replaceRows(rows: RowChange[], limit?: TeamLimit): Promise<RowsReplaced> {
    const tables = rows.map((r) => {
      const table = this.tables.get(r.db)
      if (!table) throw new Error(`${r.db} is not a shared table`)
      return table
    })
    const fields = rows.map((r) => JSON.stringify(r.key))
    const reads = rows.map((r) => rowJson(r.read))
    const values = rows.map((r) => rowJson(r.value))
    // One message per table, of the rows that change (as wrote() sends them).
    const byDb = new Map<string, { table: SharedTable; k: string[]; v: string[] }>()
    rows.forEach((r, i) => {
      if (values[i] === reads[i]) return
      let m = byDb.get(r.db)
      if (!m) byDb.set(r.db, (m = { table: tables[i], k: [], v: [] }))
      m.k.push(fields[i])
      m.v.push(values[i])
    })
    if (byDb.size === 0) return { outcome: 'replaced' }
    const redis = this.redis as Scripted
    if (!('meterdReplaceRows' in redis)) this.redis.defineCommand('meterdReplaceRows', { lua: REPLACE })
    const args = [
      ...rows.map((r) => this.hash(r.db)),
      this.channel,
      ...(limit ? [`${this.prefix}team:${rows[0].db}:${limit.team}`] : []),
      String(rows.length),
      limit ? String(limit.max) : '',
      limit?.team ?? '',
      ...rows.flatMap((_, i) => [fields[i], reads[i], values[i]]),
      ...[...byDb].map(([db, m]) => JSON.stringify({ r: this.replica, db, k: m.k, v: m.v })),
    ]
    let now: string[] | 1 | null
    try {
      now = await this.outage.guard(() => redis.meterdReplaceRows(rows.length + (limit ? 2 : 1), ...args))
    } catch (err) {
      // Unanswered is not undone: a script whose reply came too late (or was lost with the
      // connection) may have run, and its message reached the other replicas but not this one,
      // which skips its own. The rows are read again once Redis answers (else at the next resync).
      for (const m of byDb.values()) this.pull(m.table, m.k).catch((e) => this.outage.failed(e))
      throw err
    }
    if (now === 1) return { outcome: 'limited' }
    if (now !== null) return { outcome: 'changed', now: now.map((json) => (json === '' ? undefined : { value: json === TOMBSTONE ? undefined : JSON.parse(json, revive) })) }
    // Redis holds them now, and the other replicas show them from the messages. Here, as another
    // replica's rows: shown at once, committed after the rows shown before them.
    await Promise.all([...byDb.values()].map(async (m) => (await this.inTurn(m.table.db, () => ({ durable: this.show(m.table, m.k.map((f, i) => [f, m.v[i]])) }))).durable))
    return { outcome: 'replaced' }
  }

  async wrote(db: string, keys: unknown[]): Promise<void> {
    const fields = keys.map((k) => JSON.stringify(k))
    if (fields.length === 0) return
    try {
      const values = this.localRows(db, fields)
      // The rows travel in the message too, and both go in one MULTI: messages arrive in the
      // order the hash took their rows, so the others show them without reading the hash.
      const answers = await this.redis
        .multi()
        .hset(this.hash(db), ...fields.flatMap((f, i) => [f, values[i]]))
        .publish(this.channel, JSON.stringify({ r: this.replica, db, k: fields, v: values }))
        .exec()
      for (const [err] of answers ?? []) if (err) throw err
      this.outage.recovered()
    } catch (err) {
      // Committed here already (Redis answered writable() a moment before and failed since):
      // the others get it at the first resync after Redis is back.
      this.outage.failed(err)
      let d = this.dirty.get(db)
      if (!d) this.dirty.set(db, (d = new Set()))
      for (const f of fields) d.add(f)
    }
  }

  async close(): Promise<void> {
    this.closed = true
    if (this.timer) clearInterval(this.timer)
    this.timer = undefined
  }

  /** The current local rows of `fields`, as the Redis hash holds them. */
  private localRows(db: string, fields: string[]): string[] {
    const local = this.store.db<any, any>(db)
    return fields.map((f) => {
      const v = local.get(JSON.parse(f))
      return v === undefined ? TOMBSTONE : JSON.stringify(v)
    })
  }

  /** The current local rows of `fields` into the Redis hash. */
  private async push(db: string, fields: string[]): Promise<void> {
    const values = this.localRows(db, fields)
    if (fields.length) await this.redis.hset(this.hash(db), ...fields.flatMap((f, i) => [f, values[i]]))
  }

  /**
   * Runs `read` after the reads of `db` before it: rows read from Redis are shown in the order
   * Redis took them, whether they came in a message (the subscriber's connection) or were read
   * from the hash (the command connection, a round trip later). Only the reads wait their turn,
   * never a local commit.
   */
  private inTurn<T>(db: string, read: () => T | Promise<T>): Promise<T> {
    const run = (this.turns.get(db) ?? Promise.resolve()).then(read)
    const turn = run.then(
      () => undefined,
      () => undefined,
    )
    this.turns.set(db, turn)
    // Forgotten once idle: a table's turn is a settled promise most of the time.
    void turn.then(() => this.turns.get(db) === turn && this.turns.delete(db))
    return run
  }

  private async subscribe(): Promise<void> {
    if (this.subscribed) return
    this.subscribed = true
    this.sub.on('message', (_channel: string, message: string) => {
      let m: { r: string; db: string; k: string[]; v?: string[] }
      try {
        m = JSON.parse(message)
      } catch {
        return
      }
      const table = this.tables.get(m.db)
      if (m.r === this.replica || !table || this.closed) return
      this.pull(table, m.k, m.v).catch((err) => this.outage.failed(err))
    })
    // A (re)connected subscriber may have missed messages: resync then.
    this.sub.on('ready', () => {
      void this.sub.subscribe(this.channel).catch((err) => this.outage.failed(err))
      void this.resyncAll()
    })
    try {
      await this.sub.connect()
    } catch (err) {
      this.outage.failed(err)
    }
  }

  /**
   * Rows of another replica's message into the local database: the rows it carries, or (from a
   * resync, or a replica of an earlier version) those it names, read from the hash.
   */
  private async pull(table: SharedTable, fields: string[], values?: string[]): Promise<void> {
    const { durable } = await this.inTurn(table.db, async () => {
      const rows = values?.length === fields.length ? values : fields.length ? await this.redis.hmget(this.hash(table.db), ...fields) : []
      return { durable: this.show(table, fields.map((f, i) => [f, rows[i]])) }
    })
    await durable
  }

  /**
   * Rows read from Redis into the local database. They are shown at once (held pending in the
   * table's view, which its component reads, and its caches dropped); the LMDB commit is queued
   * now, so commits keep the order the rows were shown in, and the returned promise resolves once
   * it is durable. A row leaves the pending ones once its commit is visible, unless a later one
   * was held meanwhile.
   */
  private show(table: SharedTable, rows: [field: string, value: string | null][]): Promise<void> {
    if (rows.length === 0) return Promise.resolve()
    const local = this.store.db<any, any>(table.db)
    const view = this.store.view<any, unknown>(table.db)
    const writes: { key: unknown; field: string; json: string; value: unknown; mark: object }[] = []
    for (const [field, json] of rows) {
      if (json === null) continue
      const key = JSON.parse(field)
      // As committed here, and nothing else pending: nothing to do (the resync's usual case).
      if (!view.has(field) && same(local.get(key), json)) continue
      const value = json === TOMBSTONE ? undefined : JSON.parse(json, revive)
      writes.push({ key, field, json, value, mark: view.hold(field, key, value) })
    }
    // Always: another worker of this daemon (same LMDB) may have written the rows already, and
    // this process's caches still need to go.
    table.changed()
    if (writes.length === 0) return Promise.resolve()
    const commit = local.transaction(() => {
      for (const w of writes) {
        const current = local.get(w.key)
        if (w.value === undefined) {
          if (current !== undefined) local.remove(w.key)
        } else if (!same(current, w.json)) local.put(w.key, w.value)
      }
    })
    // A commit that failed leaves its rows pending (still shown): the next resync finds LMDB
    // behind Redis and writes them again.
    commit.then(
      () => writes.forEach((w) => view.settle(w.field, w.mark)),
      () => undefined,
    )
    return this.store.durable(commit)
  }

  private async resyncAll(): Promise<void> {
    for (const t of this.tables.values()) {
      if (this.closed) return
      try {
        await this.resync(t)
        this.outage.recovered()
      } catch (err) {
        this.outage.failed(err)
      }
    }
  }

  /** The whole table: dirty rows pushed, rows in Redis applied, rows only here pushed; the others are told of what was pushed. */
  private async resync(table: SharedTable): Promise<void> {
    const dirty = this.dirty.get(table.db)
    const pushed: string[] = []
    if (dirty?.size) {
      const fields = [...dirty]
      await this.push(table.db, fields)
      for (const f of fields) dirty.delete(f)
      pushed.push(...fields)
    }
    const { remote, durable } = await this.inTurn(table.db, async () => {
      const remote = await this.redis.hgetall(this.hash(table.db))
      return { remote, durable: this.show(table, Object.entries(remote)) }
    })
    await durable
    const mine: string[] = []
    for (const key of this.store.db<any, any>(table.db).getKeys({})) {
      const f = JSON.stringify(key)
      if (!(f in remote)) mine.push(f)
    }
    if (mine.length) await this.push(table.db, mine)
    pushed.push(...mine)
    if (pushed.length) await this.redis.publish(this.channel, JSON.stringify({ r: this.replica, db: table.db, k: pushed }))
  }
}
