import { createHash, randomBytes } from 'node:crypto'
import type { Database } from 'lmdb'
import type { Scope } from '../../http/server.js'
import { SCOPES } from '../../http/server.js'
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
  account?: string
  tenant?: string
  team: string
  environment?: string
  scopes: Scope[]
  name?: string
  /** Use this key instead of generating one (bootstrap from the environment). */
  key?: string
}

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

function randomToken(n: number): string {
  const bytes = randomBytes(n)
  let s = ''
  for (const b of bytes) s += BASE62[b % 62]
  return s
}

export const hashKey = (key: string): string => createHash('sha256').update(key).digest('hex')

export function parseScopes(list: string): Scope[] {
  const scopes = list.split(',').map((s) => s.trim()).filter(Boolean)
  for (const s of scopes) if (!SCOPES.includes(s as Scope)) throw new Error(`unknown scope "${s}" (scopes: ${SCOPES.join(', ')})`)
  if (!scopes.length) throw new Error('at least one scope is required')
  return scopes as Scope[]
}

/**
 * Keys in LMDB, looked up by hash on every request (a hash and one B-tree read, no cache,
 * so a revocation by the CLI in another process takes effect at once).
 */
export class KeyStore {
  private readonly byHash: Database<ApiKeyRecord, string>
  private readonly ids: Database<string, string>

  constructor(private readonly store: Store) {
    this.byHash = store.db<string, ApiKeyRecord>('apikeys')
    this.ids = store.db<string, string>('apikey-ids')
  }

  /** Creates a key and returns it: the only time the key itself exists outside the caller. */
  async create(k: NewKey): Promise<{ key: string; record: ApiKeyRecord }> {
    const tenant = k.tenant ?? 'default'
    // `hak_<tenant>_<secret>`: the classic shape, which real middleware insists on.
    const key = k.key ?? `hak_${tenant.replace(/[^A-Za-z0-9]/g, '').slice(0, 16) || 't'}_${randomToken(32)}`
    const record: ApiKeyRecord = {
      id: `key_${randomToken(12)}`,
      name: k.name ?? '',
      account: k.account ?? 'default',
      tenant,
      team: k.team,
      environment: k.environment ?? 'production',
      scopes: [...k.scopes],
      created: new Date().toISOString(),
      prefix: key.slice(0, Math.min(12, key.length - 4)),
    }
    const hash = hashKey(key)
    await this.store.durable(
      this.byHash.transaction(() => {
        if (this.byHash.get(hash)) throw new Error('this key already exists')
        this.byHash.put(hash, record)
        this.ids.put(record.id, hash)
      }),
    )
    return { key, record }
  }

  lookup(key: string): ApiKeyRecord | undefined {
    const r = this.byHash.get(hashKey(key))
    return r && !r.revoked ? r : undefined
  }

  list(): ApiKeyRecord[] {
    return [...this.byHash.getRange({}).map(({ value }) => value)].sort((a, b) => a.created.localeCompare(b.created))
  }

  isEmpty(): boolean {
    for (const _ of this.byHash.getKeys({ limit: 1 })) return false
    return true
  }

  /** Revokes by key id; false when there is no such key. */
  async revoke(id: string): Promise<boolean> {
    return this.store.durable(
      this.byHash.transaction(() => {
        const hash = this.ids.get(id)
        const r = hash ? this.byHash.get(hash) : undefined
        if (!hash || !r) return false
        if (!r.revoked) this.byHash.put(hash, { ...r, revoked: new Date().toISOString() })
        return true
      }),
    )
  }
}
