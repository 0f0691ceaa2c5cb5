import { existsSync } from 'node:fs'
import { join, resolve } from 'node:path'
import type { SharedStateConfig } from '../core/config/schema.js'
import { createTelemetry } from '../core/telemetry.js'
import { KeyRefused, KeyStore, checkLabels, parseScopes } from '../extensions/apikeys/key-store.js'
import type { SharedState } from '../ports/shared.js'
import type { Store } from '../store/store.js'
import { EX_CONFIG, EX_USAGE, ExitError, UsageError, type Command } from './command.js'
import { configOrExit } from './config.js'
import { withStore } from './store.js'

/** `meterd keys create|list|revoke` (their definitions are in main.ts). */

export type KeysCreateValues = { team?: string; scopes?: string; account?: string; tenant?: string; environment?: string; name?: string; json?: boolean; config?: string[]; init?: boolean }

/**
 * The store of the config's data directory. A directory without a store is refused unless
 * `init`: a key written there would be one the daemon, reading another directory, never sees.
 */
async function withKeyStore<T>(files: string[], init: boolean | undefined, unwritten: string, fn: (ks: KeyStore) => Promise<T>): Promise<T> {
  const { config } = configOrExit(files)
  const path = config.storage.path
  if (!init && !existsSync(join(path, 'data.mdb'))) {
    const shown = path === resolve(path) ? path : `${path} (${resolve(path)})`
    throw new ExitError(
      `no data directory at ${shown} — is the daemon using another storage.path? Pass its --config or set METERD_DATA_DIR to its data directory (or --init to create a new one here)`,
      EX_CONFIG,
    )
  }
  return withStore({ path, maxSizeMb: config.storage.max_size_mb }, unwritten, async (store) => {
    const ks = new KeyStore(store)
    // Gateway cluster: the change goes to every replica at once (docs/deployment.md).
    const shared = config.server.shared_state.backend === 'redis' ? await openSharedState(config.server.shared_state.redis, store) : undefined
    try {
      if (shared) await ks.share(shared.tables)
      return await fn(ks)
    } finally {
      await shared?.close()
    }
  })
}

export async function createKey(v: KeysCreateValues, command: Command): Promise<number> {
  if (!v.team) throw new UsageError('keys create needs --team', command)
  if (!v.scopes) throw new UsageError('keys create needs --scopes', command)
  let scopes
  try {
    scopes = parseScopes(v.scopes)
    // A wrong --account or --tenant is bad usage (64), not a failure (1).
    checkLabels({ team: v.team, account: v.account, tenant: v.tenant, environment: v.environment })
  } catch (err) {
    throw new UsageError((err as Error).message, command)
  }
  return withKeyStore(v.config ?? [], v.init, 'no key was created', async (ks) => {
    const made = await ks.create({ team: v.team!, scopes, account: v.account, tenant: v.tenant, environment: v.environment, name: v.name }).catch((err) => {
      // --team with --account, as asked, cannot be made: bad usage (64), as a wrong --account is
      // (without the usage text: the flags are well formed, the store says why not).
      throw err instanceof KeyRefused ? new ExitError(err.message, EX_USAGE) : err
    })
    const { key, record, account } = made
    const how = { given: '', team: ` (the account of team ${record.team})`, default: ' (the default; choose one with --account)' }[account]
    if (v.json) process.stdout.write(JSON.stringify({ key, ...record, accountChosen: account }) + '\n')
    else process.stdout.write(`${key}\n# id ${record.id}, account ${record.account}${how}, team ${record.team}, scopes ${record.scopes.join(',')}; shown only once\n`)
    return 0
  })
}

export function listKeys(v: { json?: boolean; config?: string[] }): Promise<number> {
  return withKeyStore(v.config ?? [], false, 'the keys were not listed', async (ks) => {
    const list = ks.list()
    if (v.json) process.stdout.write(JSON.stringify(list) + '\n')
    else
      for (const k of list)
        process.stdout.write(`${k.id}  ${k.prefix}…  account=${k.account} team=${k.team} env=${k.environment} scopes=${k.scopes.join(',')}${k.revoked ? ' REVOKED' : ''}  ${k.name}\n`)
    return 0
  })
}

export async function revokeKey(v: { config?: string[] }, id: string | undefined, command: Command): Promise<number> {
  if (!id) throw new UsageError('keys revoke needs a key id (see keys list)', command)
  return withKeyStore(v.config ?? [], false, 'the key was not revoked', async (ks) => {
    if (!(await ks.revoke(id))) throw new ExitError(`no key with id ${id}`, 1)
    process.stdout.write(`revoked ${id}\n`)
    return 0
  })
}

async function openSharedState(redis: SharedStateConfig['redis'], store: Store): Promise<SharedState> {
  const { openRedisSharedState } = await import('../store/redis/index.js')
  const { logger, registry } = createTelemetry({ level: 'warn' })
  return openRedisSharedState(redis, store, logger, registry)
}
