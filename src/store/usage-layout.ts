import type { Store } from './store.js'
import type { DedupEntry, IdempotencyEntry, IndexKey, UsageStore } from './usage-store.js'

/** The version of the usage data layout, in the store's `meta` database. */
const LAYOUT_KEY = 'usage.layout'
/**
 * 1 (no version stored; builds up to bcaa19c): dedup [account, kind, transactionId], replay
 * [account, Idempotency-Key]. 2: the same per team — [team, kind, transactionId], [team, key].
 * 3: records may also be in the fixed layout of record-codec.ts, which builds of layout 2 cannot
 * read (they refuse a directory whose layout is newer than theirs, instead of misreading it).
 */
export const USAGE_LAYOUT = 3
/** The first layout whose dedup and replay entries are per team. */
const TEAM_LAYOUT = 2

/**
 * Brings a data directory written in an earlier layout to this one when the store opens. From
 * layout 1 each dedup and replay entry is rewritten under the team of the record it names, so no
 * dedup and no replay is lost and the transactionId read filter still finds every record. From
 * layout 2 nothing is rewritten: records it stored (msgpack) still decode, and only the new
 * version is recorded, so that an older build no longer opens the directory. One transaction:
 * after a crash the directory is in one layout or the other, and a process that opens it at the
 * same time waits for the migration and then finds it done. Its memory grows with the number of
 * entries (about 200 bytes each), once.
 */
export function migrateToTeamLayout(store: Store, usage: UsageStore): void {
  const meta = store.db<string, number>('meta')
  const layout = (): number | undefined => meta.get(LAYOUT_KEY)
  if (layout() === USAGE_LAYOUT) return
  usage.records.transactionSync(() => {
    const found = layout()
    if (found === USAGE_LAYOUT) return // another process migrated first
    if (found !== undefined && found > USAGE_LAYOUT)
      throw new Error(`the data directory ${store.opts.path} was written by a newer meterd (usage layout ${found}); run that version`)
    if (found === undefined || found < TEAM_LAYOUT) {
      migrateDedup(usage)
      migrateReplay(usage)
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
function migrateDedup(usage: UsageStore): void {
  const old = [...usage.dedup.getRange({})].map(({ key, value }) => ({ key, value })) as Entry<DedupEntry>[]
  if (old.length === 0) return
  const teamOf = (id: string): string | undefined => usage.records.get(id)?.caller.team
  const next = rekeyAll(
    old,
    ({ key, value }) => {
      const team = teamOf(value.id)
      return team === undefined ? undefined : [team, key[1], key[2]]
    },
    ({ value }) => usage.displace(value.id),
  )
  for (const { key } of old) usage.dedup.remove(key)
  for (const { key, value } of next) usage.dedup.put(key, value)
}

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
