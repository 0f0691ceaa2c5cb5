import { asBinary, type Database, type Transaction } from 'lmdb'
import { USAGE_KINDS, type UsageKind, type UsageRecord } from '../model/usage-record.js'
import { ReplayTaken, type StoredResponse } from '../ports/dedup.js'
import type { ListQuery, ListResult, RecordSnapshot, UsageRecords, WriteOptions } from '../ports/usage.js'
import type { UnitCarrier } from '../ports/write-unit.js'
import { dedupEntryCodec, usageRecordCodec } from './record-codec.js'
import type { Environment } from './environment.js'
import { RANGE_END, tupleKeyEncoder, type TupleKey } from './tuple-key.js'

export interface DedupEntry {
  id: string
  at: number
}

export interface IdempotencyEntry {
  bodyHash: string
  response: StoredResponse
  at: number
}

export type { ListQuery, ListResult, WriteOptions } from '../ports/usage.js'

// Index keys are arrays of strings, ordered element by element (tuple-key.ts; usage layout 4):
//   ['t', team, kind, eventTime, id]        a team's records by time
//   ['x', team, kind, transactionId, id]    by transactionId: only records a later record with the
//                                           same transactionId displaced from the dedup table (and
//                                           every record written by earlier builds)
//   ['r', team, kind, traceId, id]          by traceId
//   ['o', team, toolId, eventTime, id]      a team's tool events per tool, by time
//   ['u', team, kind, eventTime, id]        records stored unpriced (`meterd reprice` removes the entry)
export type IndexKey = TupleKey

const NO_DUPLICATES: ReadonlyMap<string, string> = new Map()

/**
 * An index entry's value, null, as the msgpack byte the index database's encoder writes for it
 * (0xc0): handed to lmdb-js already encoded, so a put does not run msgpackr for it.
 */
const NULL_VALUE = asBinary(new Uint8Array([0xc0])) as unknown as null

const LOW = '' // sorts before every string
const HIGH: typeof RANGE_END = RANGE_END // sorts after every string

/**
 * Records, their indexes, the transactionId dedup table and the Idempotency-Key
 * replay table. A record, its index entries and its dedup/replay entries are written
 * in one transaction, so after a crash either all of them exist or none does.
 *
 * Dedup and replay are per team, the unit every read and write is scoped to: [team, kind,
 * transactionId] and [team, Idempotency-Key]. Data directories written in the earlier layout
 * (per account) are migrated when the store opens (usage-layout.ts).
 *
 * The dedup table, [team, kind, transactionId] → the latest record's id, is also the
 * transactionId index: its entries are kept after the dedup window (which is checked by their
 * time), and a record only gets an 'x' index entry once a later one under the same
 * transactionId takes its place there. Client transactionIds are random, so each entry is a
 * put on a random page of its B-tree: one such put per record instead of two is a quarter
 * fewer pages written per commit (docs/performance.md).
 */
export class UsageStore implements UsageRecords {
  readonly records: Database<UsageRecord, string>
  readonly index: Database<null, IndexKey>
  readonly dedup: Database<DedupEntry, IndexKey>
  readonly replay: Database<IdempotencyEntry, IndexKey>

  constructor(private readonly store: Environment) {
    // Records in a fixed layout around the msgpack body (record-codec.ts); older ones decode as before.
    this.records = store.db<string, UsageRecord>('usage-records', { sharedStructures: true, codec: usageRecordCodec })
    // Keys in tuple-key.ts's encoding, which LMDB compares with memcmp (layout 4; earlier
    // layouts kept them in `usage-index` and `usage-dedup`, usage-layout.ts moves them).
    this.index = store.db<IndexKey, null>('usage-index.4', { keyEncoder: tupleKeyEncoder })
    this.dedup = store.db<IndexKey, DedupEntry>('usage-dedup.4', { sharedStructures: true, codec: dedupEntryCodec, keyEncoder: tupleKeyEncoder })
    this.replay = store.db<IndexKey, IdempotencyEntry>('usage-idempotency', { sharedStructures: true })
  }

  dedupKey(team: string, kind: UsageKind, transactionId: string): IndexKey {
    return [team, kind, transactionId]
  }

  /** The id of the team's record already stored under this transactionId within the window, if any. */
  findDuplicate(team: string, kind: UsageKind, transactionId: string, windowMs: number, now: number): string | undefined {
    const e = this.dedup.get(this.dedupKey(team, kind, transactionId))
    return e && now - e.at < windowMs ? e.id : undefined
  }

  findReplay(team: string, key: string, ttlMs: number, now: number): IdempotencyEntry | undefined {
    const e = this.replay.get([team, key])
    return e && now - e.at < ttlMs ? e : undefined
  }

  guardReplay(ctx: UnitCarrier, team: string, key: string, ttlMs: number, now: number): void {
    // The unit's first step, so nothing of the request is put when it throws.
    ;(ctx.unit ??= this.store.unit()).add(() => {
      if (this.findReplay(team, key, ttlMs, now)) throw new ReplayTaken()
    })
  }

  /**
   * Puts a batch's records, index entries and dedup/replay entries; must run inside a write
   * transaction (the lmdb exporter's WriteUnit step). Each record whose transactionId is already
   * stored within the window (by a concurrent request of another process, say) is skipped;
   * the returned map gives, for such records, the id that was kept (a shared empty map when
   * there are none, the usual case: nothing is allocated for it).
   */
  writeInTransaction(records: UsageRecord[], opts: WriteOptions): ReadonlyMap<string, string> {
    let kept: Map<string, string> | undefined
    for (const r of records) {
      const tx = r.body.transactionId
      if (typeof tx === 'string' && tx !== '') {
        const dk = this.dedupKey(r.caller.team, r.kind, tx)
        const entry = { id: r.id, at: opts.now }
        // Usually there is no entry yet: one put that refuses to overwrite instead of a get and a put.
        if (!this.store.putIfAbsent(this.dedup, dk, entry)) {
          const prior = this.dedup.get(dk)
          if (prior && opts.now - prior.at < opts.dedupWindowMs && prior.id !== r.id) {
            ;(kept ??= new Map()).set(r.id, prior.id)
            continue
          }
          if (prior && prior.id !== r.id) this.displace(prior.id)
          this.dedup.put(dk, entry) // an expired entry, or this record's own (a retried batch)
        }
      }
      this.records.put(r.id, r)
      for (const k of indexKeys(r)) this.index.put(k, NULL_VALUE)
    }
    if (opts.idempotency) {
      const { team, key, bodyHash, at, response } = opts.idempotency
      this.replay.put([team, key], { bodyHash, response: response(kept ?? NO_DUPLICATES), at })
    }
    return kept ?? NO_DUPLICATES
  }

  /** A record leaves the dedup table for a later one with its transactionId: it keeps an 'x' entry. */
  displace(id: string): void {
    const old = this.records.get(id)
    const tx = old?.body.transactionId
    if (old && typeof tx === 'string') this.index.put(['x', old.caller.team, old.kind, tx, old.id], NULL_VALUE)
  }

  get(id: string): UsageRecord | undefined {
    return this.records.get(id)
  }

  /** A team's records with this transactionId, newest first: the dedup table's and the 'x' index's. */
  private byTransaction(q: ListQuery, transactionId: string): UsageRecord[] {
    const ids = new Set<string>()
    const latest = this.dedup.get(this.dedupKey(q.team, q.kind, transactionId))
    if (latest) ids.add(latest.id)
    const prefix = ['x', q.team, q.kind, transactionId]
    for (const key of this.index.getKeys({ start: [...prefix, LOW], end: [...prefix, HIGH] })) ids.add(key[key.length - 1] as string)
    const out: UsageRecord[] = []
    for (const id of [...ids].sort().reverse()) {
      const r = this.records.get(id)
      if (!r || r.caller.team !== q.team || r.kind !== q.kind) continue
      if ((q.from !== undefined && r.eventTime < q.from) || (q.to !== undefined && r.eventTime >= q.to)) continue
      out.push(r)
    }
    return out
  }

  /** A team's records, newest first, one page at a time. */
  list(q: ListQuery): ListResult {
    if (q.transactionId !== undefined) {
      const all = this.byTransaction(q, q.transactionId)
      return { records: all.slice(q.page * q.size, (q.page + 1) * q.size), total: all.length }
    }
    let prefix: IndexKey
    let timeFiltered = false
    if (q.traceId !== undefined) prefix = ['r', q.team, q.kind, q.traceId]
    else if (q.toolId !== undefined && q.kind === 'tool') {
      prefix = ['o', q.team, q.toolId]
      timeFiltered = true
    } else {
      prefix = ['t', q.team, q.kind]
      timeFiltered = true
    }
    const range = timeFiltered
      ? { start: [...prefix, q.to ?? HIGH], end: [...prefix, q.from ?? LOW], reverse: true }
      : { start: [...prefix, HIGH], end: [...prefix, LOW], reverse: true }
    const skip = q.page * q.size
    const out: UsageRecord[] = []
    let total = 0
    for (const key of this.index.getKeys(range)) {
      const id = key[key.length - 1] as string
      // A time range on a traceId lookup is applied to the record itself.
      if (!timeFiltered && (q.from !== undefined || q.to !== undefined)) {
        const r = this.records.get(id)
        if (!r || (q.from !== undefined && r.eventTime < q.from) || (q.to !== undefined && r.eventTime >= q.to)) continue
      }
      // `to` is exclusive: the range start is inclusive of the key [.., to], so drop it.
      if (timeFiltered && q.to !== undefined && key[key.length - 2] === q.to) continue
      if (total >= skip && out.length < q.size) {
        const r = this.records.get(id)
        if (r) out.push(r)
      }
      total++
    }
    return { records: out, total }
  }

  /** A team's records of both kinds whose event time is in [from, to) (ISO), oldest first within a kind. */
  *inWindow(team: string, from: string, to: string): IterableIterator<UsageRecord> {
    for (const kind of USAGE_KINDS) {
      for (const key of this.index.getKeys({ start: ['t', team, kind, from], end: ['t', team, kind, to] })) {
        const r = this.records.get(key[key.length - 1] as string)
        if (r) yield r
      }
    }
  }

  /** A team's records of one kind stored unpriced, newest first, event time in [from, to). */
  *unpriced(team: string, kind: UsageKind, from?: string, to?: string): IterableIterator<UsageRecord> {
    for (const key of this.index.getKeys({ start: ['u', team, kind, to ?? HIGH], end: ['u', team, kind, from ?? LOW], reverse: true })) {
      if (to !== undefined && key[3] === to) continue
      const r = this.records.get(key[4] as string)
      if (r) yield r
    }
  }

  unpricedCount(): number {
    return this.index.getKeysCount({ start: UNPRICED_START, end: UNPRICED_END })
  }

  *unpricedIds(): IterableIterator<string> {
    for (const key of this.index.getKeys({ start: UNPRICED_START, end: UNPRICED_END })) yield key[key.length - 1] as string
  }

  snapshot(): RecordSnapshot {
    return new LmdbSnapshot(this.store.root.useReadTransaction(), this.records)
  }

  *scan(after: string | undefined, limit: number, snapshot?: RecordSnapshot): IterableIterator<UsageRecord> {
    const transaction = snapshot instanceof LmdbSnapshot ? snapshot.txn : undefined
    for (const { key, value } of this.records.getRange({ start: after, limit: after === undefined ? limit : limit + 1, transaction })) {
      // Not a record: lmdb-js keeps the msgpack shared structures in the same database.
      if (typeof key !== 'string' || key === after) continue
      yield value
    }
  }

  /**
   * Drops Idempotency-Key replay entries older than their window; returns how many went.
   * Dedup entries stay: they are the transactionId index too, and their window is checked by time.
   */
  async sweep(now: number, replayTtlMs: number): Promise<number> {
    let n = 0
    await this.records.transaction(() => {
      for (const { key, value } of this.replay.getRange({})) {
        if (now - value.at >= replayTtlMs) this.replay.remove(key), n++
      }
    })
    return n
  }
}

// The index of records stored unpriced, every team: ['u', team, kind, eventTime, id].
export const UNPRICED_START: IndexKey = ['u']
export const UNPRICED_END: IndexKey = ['u', HIGH]

class LmdbSnapshot implements RecordSnapshot {
  private open = true

  constructor(readonly txn: Transaction, private readonly records: Database<UsageRecord, string>) {}

  has(id: string): boolean {
    return this.records.get(id, { transaction: this.txn }) !== undefined
  }

  release(): void {
    if (this.open) this.txn.done()
    this.open = false
  }
}

/** The index entry of a record stored unpriced (src/domain/pricing/reprice.ts lists and clears these). */
export function unpricedKey(r: UsageRecord): IndexKey {
  return ['u', r.caller.team, r.kind, r.eventTime, r.id]
}

function indexKeys(r: UsageRecord): IndexKey[] {
  const team = r.caller.team
  const keys: IndexKey[] = [['t', team, r.kind, r.eventTime, r.id]]
  if (r.attribution.traceId) keys.push(['r', team, r.kind, r.attribution.traceId, r.id])
  if (r.kind === 'tool') keys.push(['o', team, r.body.toolId, r.eventTime, r.id])
  if (r.cost?.source === 'unpriced') keys.push(unpricedKey(r))
  return keys
}
