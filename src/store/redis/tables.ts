import { randomUUID } from 'node:crypto'
import type { Redis } from 'ioredis'
import type { Logger } from 'pino'
import type { SharedTable, SharedTables } from '../../ports/tables.js'
import type { Store } from '../store.js'
import type { Outage } from './connection.js'

/** A removed row: kept in Redis so a replica that missed the message removes it at its resync. */
const TOMBSTONE = 'null'

/** Buffers (sealed signing secrets) survive JSON as {type: 'Buffer', data}. */
const revive = (_k: string, v: any): unknown => (v && v.type === 'Buffer' && Array.isArray(v.data) ? Buffer.from(v.data) : v)

/**
 * Tables of rows (API keys, tools, export configurations, alert rules) shared through Redis and
 * mirrored into each replica's LMDB, which is what the components read (and cache).
 *
 * - A write commits to the local LMDB, then its rows go to a Redis hash per table
 *   (`t:<db>`: JSON key → JSON value, `null` once removed) and a message on the `changes`
 *   channel names them. A row whose push failed is pushed again at the next resync.
 * - Every replica subscribes: a message's rows are read from the hash and written to the
 *   local database, then the table's `changed()` drops its caches. A change is seen by the
 *   other replicas within one Redis round trip and an LMDB commit (milliseconds).
 * - Every resync_seconds (and at attach) each table is read whole: rows in Redis win, rows
 *   only this replica has are pushed (a change made while Redis was down).
 */
export class RedisTables implements SharedTables {
  private readonly replica = randomUUID()
  private readonly tables = new Map<string, SharedTable>()
  private readonly dirty = new Map<string, Set<string>>()
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

  async wrote(db: string, keys: unknown[]): Promise<void> {
    const fields = keys.map((k) => JSON.stringify(k))
    try {
      await this.push(db, fields)
      await this.redis.publish(this.channel, JSON.stringify({ r: this.replica, db, k: fields }))
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

  /** The current local rows of `fields` into the Redis hash. */
  private async push(db: string, fields: string[]): Promise<void> {
    const local = this.store.db<any, any>(db)
    const args: string[] = []
    for (const f of fields) {
      const v = local.get(JSON.parse(f))
      args.push(f, v === undefined ? TOMBSTONE : JSON.stringify(v))
    }
    if (args.length) await this.redis.hset(this.hash(db), ...args)
  }

  private async subscribe(): Promise<void> {
    if (this.subscribed) return
    this.subscribed = true
    this.sub.on('message', (_channel: string, message: string) => {
      let m: { r: string; db: string; k: string[] }
      try {
        m = JSON.parse(message)
      } catch {
        return
      }
      const table = this.tables.get(m.db)
      if (m.r === this.replica || !table || this.closed) return
      this.pull(table, m.k).catch((err) => this.outage.failed(err))
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

  /** Rows named by another replica's message, from Redis into the local database. */
  private async pull(table: SharedTable, fields: string[]): Promise<void> {
    const values = fields.length ? await this.redis.hmget(this.hash(table.db), ...fields) : []
    await this.apply(
      table,
      fields.map((f, i) => [f, values[i]]),
    )
  }

  private async apply(table: SharedTable, rows: [field: string, value: string | null][]): Promise<void> {
    if (rows.length === 0) return
    const local = this.store.db<any, any>(table.db)
    await this.store.durable(
      local.transaction(() => {
        for (const [f, v] of rows) {
          if (v === null) continue
          const key = JSON.parse(f)
          const current = local.get(key)
          if (v === TOMBSTONE) {
            if (current !== undefined) local.remove(key)
          } else if (current === undefined || JSON.stringify(current) !== v) {
            local.put(key, JSON.parse(v, revive))
          }
        }
      }),
    )
    // Always: another worker of this daemon (same LMDB) may have written the rows already, and
    // this process's caches still need to go.
    table.changed()
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
    const remote = await this.redis.hgetall(this.hash(table.db))
    await this.apply(table, Object.entries(remote))
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
