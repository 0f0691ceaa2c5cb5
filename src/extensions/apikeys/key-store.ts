import { hash, randomBytes } from 'node:crypto'
import type { Database } from 'lmdb'
import { SCOPES, type Scope } from '../../transport/admission/index.js'
import type { SharedTables, TableView } from '../../ports/tables.js'
import type { Store } from '../../store/store.js'

/** An API key as stored: never the key itself, only its SHA-256. */
export interface ApiKeyRecord {
  id: string
  name: string
  account: string
  tenant: string
  team: string
  environment: string
  scopes: Scope[]
  created: string
  revoked?: string
  /** First characters of the key, enough to recognise it in `keys list`. */
  prefix: string
}

export interface NewKey {
  /** Defaults to the account the team already belongs to, else `default`. */
  account?: string
  tenant?: string
  team: string
  environment?: string
  scopes: Scope[]
  name?: string
  /** Use this key instead of generating one (bootstrap from the environment). */
  key?: string
}

/** How a new key's account was chosen: given, the team's own, or the default for a new team. */
export type AccountChoice = 'given' | 'team' | 'default'

/**
 * Names of accounts, tenants, teams and environments: 1 to 255 characters without control
 * characters. Dedup, replay and every index key hold the team name (src/model/identifiers.ts).
 */
const NAME = /^[^\u0000-\u001f\u007f]{1,255}$/

/** Throws when a team, account, tenant or environment name is empty, too long or has control characters (the CLI checks before opening the store). */
export function checkLabels(k: { team?: string; account?: string; tenant?: string; environment?: string }): void {
  for (const what of ['team', 'account', 'tenant', 'environment'] as const) {
    const v = k[what]
    if (v !== undefined && !NAME.test(v)) throw new Error(`the ${what} name must be 1 to 255 characters without control characters`)
  }
}

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

function randomToken(n: number): string {
  const bytes = randomBytes(n)
  let s = ''
  for (const b of bytes) s += BASE62[b % 62]
  return s
}

export const hashKey = (key: string): string => hash('sha256', key, 'hex')

/** A name's characters beyond ASCII as U+XXXX, so that two names that look the same can be told apart. */
const codePoints = (name: string): string => [...name].map((c) => (c.charCodeAt(0) < 0x80 ? c : `U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`)).join('')

export function parseScopes(list: string): Scope[] {
  const scopes = list.split(',').map((s) => s.trim()).filter(Boolean)
  for (const s of scopes) if (!SCOPES.includes(s as Scope)) throw new Error(`unknown scope "${s}" (scopes: ${SCOPES.join(', ')})`)
  if (!scopes.length) throw new Error('at least one scope is required')
  return scopes as Scope[]
}

/** Most keys remembered by one process; past it the cache starts over (no eviction order to keep). */
const CACHE_LIMIT = 10_000
const GENERATION = 'generation'
/** How long the generation read from LMDB is trusted: a revocation applies within this time. */
const GENERATION_TTL_MS = 10

/**
 * Keys in LMDB, stored by hash. Lookups are cached per process behind a generation
 * counter that every create and revoke bumps in the same transaction. The counter is read
 * at most every 10 ms (lmdb-js renews its read snapshot every event-loop turn, so that read
 * sees other processes' commits): a revocation by the CLI applies to the daemon within
 * 10 ms, and a request under load costs neither a hash nor a B-tree read.
 */
export class KeyStore {
  private readonly byHash: Database<ApiKeyRecord, string>
  private readonly ids: Database<string, string>
  private readonly meta: Database<number, string>
  private readonly cache = new Map<string, ApiKeyRecord>()
  /** The keys as lookups read them: in a gateway cluster, another replica's change before it is committed here (a revocation at once). */
  private readonly shown: TableView<string, ApiKeyRecord>
  private cachedGeneration = -1
  private generationReadAt = -Infinity
  private shared?: SharedTables

  constructor(private readonly store: Store) {
    this.byHash = store.db<string, ApiKeyRecord>('apikeys')
    this.shown = store.view<string, ApiKeyRecord>('apikeys')
    this.ids = store.db<string, string>('apikey-ids')
    this.meta = store.db<string, number>('apikey-meta')
  }

  /**
   * Gateway cluster: keys are shared with the other replicas (written through to Redis, mirrored
   * here; another replica's change is looked up, and the cache dropped, as soon as it is read
   * from Redis, before its commit here).
   */
  async share(tables: SharedTables): Promise<void> {
    this.shared = tables
    const changed = () => {
      this.cache.clear()
      this.generationReadAt = -Infinity
    }
    await tables.attach([
      { db: 'apikeys', changed },
      // Read only inside revoke()'s transaction (local-first, as every write).
      { db: 'apikey-ids', changed },
    ])
  }

  /** Call inside a write transaction that changes a key. */
  private bump(): void {
    this.meta.put(GENERATION, (this.meta.get(GENERATION) ?? 0) + 1)
  }

  /** The account a team belongs to: that of its keys (revoked ones included), if it has any. */
  accountOf(team: string): string | undefined {
    for (const { value } of this.byHash.getRange({})) if (value.team === team) return value.account
    return undefined
  }

  /**
   * An existing team that reads the same as `team` but is other code points (`café` composed, and
   * `cafe` + U+0301): its name, else undefined. Two such teams would be two data boundaries, and
   * accounts, that no listing tells apart.
   */
  private lookalikeOf(team: string): string | undefined {
    const nfc = team.normalize('NFC')
    for (const { value } of this.byHash.getRange({})) if (value.team !== team && value.team.normalize('NFC') === nfc) return value.team
    return undefined
  }

  /**
   * Creates a key and returns it: the only time the key itself exists outside the caller. A team
   * belongs to one account (docs/architecture.md, Identity): a key for a team already used under
   * another account is refused.
   */
  async create(k: NewKey, opts: { bootstrap?: boolean } = {}): Promise<{ key: string; record: ApiKeyRecord; account: AccountChoice }> {
    const tenant = k.tenant ?? 'default'
    const environment = k.environment ?? 'production'
    checkLabels({ ...k, tenant, environment })
    // `hak_<tenant>_<secret>`: the classic shape, which real middleware insists on.
    const key = k.key ?? `hak_${tenant.replace(/[^A-Za-z0-9]/g, '').slice(0, 16) || 't'}_${randomToken(32)}`
    const record: ApiKeyRecord = {
      id: `key_${randomToken(12)}`,
      name: k.name ?? '',
      account: k.account ?? 'default',
      tenant,
      team: k.team,
      environment,
      scopes: [...k.scopes],
      created: new Date().toISOString(),
      prefix: key.slice(0, Math.min(12, key.length - 4)),
    }
    let choice: AccountChoice = k.account === undefined ? 'default' : 'given'
    const digest = hashKey(key)
    // Gateway cluster: refused (503) while Redis is unreachable, not kept by this replica alone.
    // The first admin key is made at start-up even so: every replica is given the same one.
    if (!opts.bootstrap) await this.shared?.writable()
    await this.store.durable(
      this.byHash.transaction(() => {
        if (this.byHash.get(digest)) throw new Error('this key already exists')
        const owner = this.accountOf(k.team)
        const lookalike = owner === undefined ? this.lookalikeOf(k.team) : undefined
        if (lookalike !== undefined)
          throw new KeyRefused(
            `team "${k.team}" reads the same as the existing team "${lookalike}" but is written with other Unicode code points (${codePoints(k.team)}, not ${codePoints(lookalike)}): use the existing team's spelling, or a name that reads differently`,
          )
        if (owner !== undefined && k.account === undefined) {
          record.account = owner
          choice = 'team'
        } else if (owner !== undefined && owner !== record.account) {
          throw new KeyRefused(`team "${k.team}" belongs to account "${owner}": a team belongs to one account (leave out --account, or pass --account ${owner})`)
        }
        this.byHash.put(digest, record)
        this.ids.put(record.id, digest)
        this.bump()
      }),
    )
    await this.shared?.wrote('apikeys', [digest])
    await this.shared?.wrote('apikey-ids', [record.id])
    return { key, record, account: choice }
  }

  /** The live key record for a presented key; unknown and revoked keys are never cached. */
  lookup(key: string): ApiKeyRecord | undefined {
    const now = performance.now()
    if (now - this.generationReadAt >= GENERATION_TTL_MS) {
      this.generationReadAt = now
      const generation = this.meta.get(GENERATION) ?? 0
      if (generation !== this.cachedGeneration) {
        this.cache.clear()
        this.cachedGeneration = generation
      }
    }
    const cached = this.cache.get(key)
    if (cached) return cached
    const r = this.shown.get(hashKey(key))
    if (!r || r.revoked) return undefined
    if (this.cache.size >= CACHE_LIMIT) this.cache.clear()
    this.cache.set(key, r)
    return r
  }

  list(): ApiKeyRecord[] {
    return [...this.shown.range()].map(({ value }) => value).sort((a, b) => a.created.localeCompare(b.created))
  }

  isEmpty(): boolean {
    for (const _ of this.byHash.getKeys({ limit: 1 })) return false
    return true
  }

  /** Revokes by key id; false when there is no such key. */
  async revoke(id: string): Promise<boolean> {
    let digest: string | undefined
    await this.shared?.writable()
    const found = await this.store.durable(
      this.byHash.transaction(() => {
        digest = this.ids.get(id)
        const r = digest ? this.byHash.get(digest) : undefined
        if (!digest || !r) return false
        if (!r.revoked) {
          this.byHash.put(digest, { ...r, revoked: new Date().toISOString() })
          this.bump()
        }
        return true
      }),
    )
    this.generationReadAt = -Infinity // this process sees its own revocation at the next request
    if (found && digest !== undefined) await this.shared?.wrote('apikeys', [digest])
    return found
  }
}

/** A key that may not be made as asked (a team of another account, a lookalike team name): what was asked is wrong, not the store. */
export class KeyRefused extends Error {}
