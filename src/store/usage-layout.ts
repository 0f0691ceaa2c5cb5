import type { Database } from 'lmdb'
import { dedupEntryCodec } from './record-codec.js'
import type { Environment } from './environment.js'
import type { DedupEntry, IdempotencyEntry, IndexKey, UsageStore } from './usage-store.js'

/** The version of the usage data layout, in the store's `meta` database. */
const LAYOUT_KEY = 'usage.layout'
/**
 * 1 (no version stored; builds up to bcaa19c): dedup [account, kind, transactionId], replay
 * [account, Idempotency-Key]. 2: the same per team — [team, kind, transactionId], [team, key].
 * 3: records may also be in the fixed layout of record-codec.ts, which builds of layout 2 cannot
 * read (they refuse a directory whose layout is newer than theirs, instead of misreading it).
 * 4: the index and dedup entries are in the databases `usage-index.4` and `usage-dedup.4`, with
 * keys in tuple-key.ts's encoding (compared by memcmp) instead of lmdb-js's array keys in
 * `usage-index` and `usage-dedup`; the same keys, element for element, in the same order.
 * 5: records may also be in record-codec.ts's format 2 (the body in meterd's own encoding),
 * which builds of layout 4 cannot read: nothing moves, the number only keeps those builds out.
 */
export const USAGE_LAYOUT = 5
/** The first layout whose dedup and replay entries are per team. */
const TEAM_LAYOUT = 2
/** The first layout whose index and dedup keys are in tuple-key.ts's encoding. */
const TUPLE_KEY_LAYOUT = 4

/** The databases that held the index and dedup entries up to layout 3 (lmdb-js's array keys). */
interface EarlierKeys {
  index: Database<null, IndexKey>
  dedup: Database<DedupEntry, IndexKey>
}

/**
 * Brings a data directory written in an earlier layout to this one when the store opens. From
 * layout 1 each dedup and replay entry is rewritten under the team of the record it names, so no
 * dedup and no replay is lost and the transactionId read filter still finds every record. From
 * layout 2 or 3 records are not rewritten (records stored in msgpack still decode), and every
 * index and dedup entry moves, with its key and value unchanged, from the databases of lmdb-js's
 * array keys to those of layout 4 (tuple-key.ts); the earlier databases are left empty. The new
 * version is recorded, so that an older build no longer opens the directory. One transaction:
 * after a crash the directory is in one layout or the other, and a process that opens it at the
 * same time waits for the migration and then finds it done. Index and dedup entries move
 * 10,000 at a time, so memory stays bounded; layout 1's dedup and replay rewrite holds its
 * entries in memory (about 200 bytes each), once.
 */
export function migrateUsageLayout(store: Environment, usage: UsageStore): void {
  const meta = store.db<string, number>('meta')
  const layout = (): number | undefined => meta.get(LAYOUT_KEY)
  if (layout() === USAGE_LAYOUT) return
  usage.records.transactionSync(() => {
    const found = layout()
    if (found === USAGE_LAYOUT) return // another process migrated first
    if (found !== undefined && found > USAGE_LAYOUT)
      throw new Error(`the data directory ${store.opts.path} was written by a newer meterd (usage layout ${found}); run that version`)
    // A new directory (no layout, no record) has nothing to migrate: no database of an earlier layout is opened.
    const fresh = found === undefined && [...usage.records.getKeys({ limit: 1 })].length === 0
    if (!fresh && (found === undefined || found < TUPLE_KEY_LAYOUT)) {
      const earlier: EarlierKeys = {
        index: store.db<IndexKey, null>('usage-index'),
        dedup: store.db<IndexKey, DedupEntry>('usage-dedup', { sharedStructures: true, codec: dedupEntryCodec }),
      }
      if (found === undefined || found < TEAM_LAYOUT) {
        migrateDedup(earlier, usage)
        migrateReplay(usage)
      }
      moveKeys(earlier.index, usage.index)
      moveKeys(earlier.dedup, usage.dedup)
    }
    meta.put(LAYOUT_KEY, USAGE_LAYOUT)
  })
}

interface Entry<V> {
  key: IndexKey
  value: V
}

/** Re-keys entries by `rekey` (undefined: the entry is dropped); of two that meet, the later `at` stays, the other goes to `lost`. */
function rekeyAll<V extends { at: number }>(entries: Entry<V>[], rekey: (e: Entry<V>) => IndexKey | undefined, lost: (e: Entry<V>) => void): Entry<V>[] {
  const out = new Map<string, Entry<V>>()
  for (const e of entries) {
    const key = rekey(e)
    if (key === undefined) continue
    const id = JSON.stringify(key)
    const other = out.get(id)
    const next = { key, value: e.value }
    if (other === undefined) out.set(id, next)
    else if (other.value.at >= e.value.at) lost(next)
    else {
      out.set(id, next)
      lost(other)
    }
  }
  return [...out.values()]
}

/**
 * [account, kind, tx] → [team of its record, kind, tx]. Two accounts' entries can only meet when
 * one team was used under both: the earlier record keeps an 'x' index entry, as a record a later
 * one displaced does, so the read filter still lists it. An entry whose record is gone is dropped.
 */
function migrateDedup(earlier: EarlierKeys, usage: UsageStore): void {
  const old = [...earlier.dedup.getRange({})].map(({ key, value }) => ({ key, value })) as Entry<DedupEntry>[]
  if (old.length === 0) return
  const teamOf = (id: string): string | undefined => usage.records.get(id)?.caller.team
  const next = rekeyAll(
    old,
    ({ key, value }) => {
      const team = teamOf(value.id)
      return team === undefined ? undefined : [team, key[1], key[2]]
    },
    ({ value }) => {
      // As UsageStore.displace, in the index of this layout.
      const r = usage.records.get(value.id)
      const tx = r?.body.transactionId
      if (r && typeof tx === 'string') earlier.index.put(['x', r.caller.team, r.kind, tx, r.id], null)
    },
  )
  for (const { key } of old) earlier.dedup.remove(key)
  for (const { key, value } of next) earlier.dedup.put(key, value)
}

/**
 * Every entry of `from` (lmdb-js's array keys) into `to` (tuple-key.ts), key and value as they
 * are; `from` is left empty. Keys of these databases are arrays of strings (usage-store.ts), the
 * only keys tuple-key.ts encodes; lmdb-js's iteration leaves out its shared structures' key.
 */
function moveKeys<V>(from: Database<V, IndexKey>, to: Database<V, IndexKey>): void {
  // A chunk at a time from the front (what was moved is gone from `from`), so memory stays
  // bounded by the chunk however many entries the directory holds.
  for (;;) {
    const chunk = [...from.getRange({ limit: MOVE_CHUNK })].map(({ key, value }) => ({ key, value }))
    if (chunk.length === 0) return
    for (const { key, value } of chunk) {
      to.put(key, value)
      from.remove(key)
    }
  }
}

const MOVE_CHUNK = 10_000

/** [account, key] → [team, key]: the team is that of the first record the stored answer names. */
function migrateReplay(usage: UsageStore): void {
  const old = [...usage.replay.getRange({})].map(({ key, value }) => ({ key, value })) as Entry<IdempotencyEntry>[]
  if (old.length === 0) return
  const next = rekeyAll(
    old,
    ({ key, value }) => {
      const team = usage.records.get(firstId(value.response.body) ?? '')?.caller.team
      return team === undefined ? undefined : [team, key[1]]
    },
    () => undefined,
  )
  for (const { key } of old) usage.replay.remove(key)
  for (const { key, value } of next) usage.replay.put(key, value)
}

/** The id of the first ack in a stored answer (`{"id":…}` or `[{"id":…},…]`). */
function firstId(body: string): string | undefined {
  try {
    const parsed = JSON.parse(body) as { id?: unknown } | { id?: unknown }[]
    const id = Array.isArray(parsed) ? parsed[0]?.id : parsed.id
    return typeof id === 'string' ? id : undefined
  } catch {
    return undefined
  }
}
