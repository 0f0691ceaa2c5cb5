import type { Component, CreateSettings, ExtensionFactory, Host } from '../../host/component.js'
import { ApiError } from '../../core/errors.js'
import { StartupError, startupWriteFailure } from '../../core/startup-error.js'
import { presentedKey, type AdmissionRequest, type Authenticator, type Principal } from '../../transport/admission/index.js'
import { resolveKeyRoute } from './resolve-key.js'
import { KeyStore, type ApiKeyRecord } from './key-store.js'
import { apikeysDescriptor, type Config } from './descriptor.js'
import { MIN_BOOTSTRAP_KEY } from './descriptor.js'

const missing = (req: AdmissionRequest): ApiError => {
  // An Authorization header that is not `Bearer <key>` (another scheme, or a value with spaces) was
  // no key to meterd: say what was read, not only that a key is needed.
  const auth = req.header('authorization')
  const scheme = auth?.trim().split(/\s+/)[0] ?? ''
  const read =
    auth === undefined
      ? ''
      : /^bearer$/i.test(scheme)
        ? ' (the Authorization header was read as no key: it must be `Bearer <key>`, the key alone after the scheme, with no spaces in it)'
        : " (the Authorization header's scheme is not Bearer; its value is not echoed)"
  return new ApiError(401, 'authentication_error', 'missing_api_key', `an API key is required: send it in x-api-key or Authorization: Bearer${read}`)
}
const unknown = (): ApiError => new ApiError(401, 'authentication_error', 'invalid_api_key', 'the API key is not valid')

export class ApiKeys implements Component, Authenticator {
  keys?: KeyStore
  /** One principal per cached key record, so an authenticated request allocates nothing. */
  private readonly principals = new WeakMap<ApiKeyRecord, Principal>()

  constructor(private readonly settings: CreateSettings, private readonly config: Config) {}

  async start(host: Host): Promise<void> {
    this.keys = new KeyStore(host.store)
    // Shared keys first: a cluster's replicas bootstrap only when none of them has a key.
    if (host.shared) await this.keys.share(host.shared.tables)
    host.admission.setAuthenticator(this)
    host.http.route(resolveKeyRoute)
    if (this.config.bootstrap && this.keys.isEmpty()) {
      const supplied = this.config.bootstrap_key ?? (process.env.METERD_BOOTSTRAP_API_KEY || undefined)
      // The same floor as bootstrap_key's schema: an admin key short enough to guess is refused.
      if (supplied !== undefined && supplied.length < MIN_BOOTSTRAP_KEY)
        throw new StartupError(
          `METERD_BOOTSTRAP_API_KEY is ${supplied.length} characters long: the first admin key must have at least ${MIN_BOOTSTRAP_KEY}`,
          'set a longer random value (e.g. `openssl rand -hex 24`), or unset it to have a key generated and printed',
        )
      // Without it nobody could use the daemon: a disk that cannot take it stops the start, in one line.
      const { key, record } = await this.keys
        .create({ team: 'default', scopes: ['admin'], name: 'first admin key', key: supplied }, { bootstrap: true })
        .catch(async (err: unknown) => {
          throw (await startupWriteFailure(err, host.store.opts.path, 'the first admin key was not created')) ?? err
        })
      if (supplied) {
        // The operator already has it (METERD_BOOTSTRAP_API_KEY or bootstrap_key): never echoed, stdout is often kept as logs.
        this.settings.logger.info({ keyId: record.id, team: record.team }, 'created the first admin key from the supplied bootstrap key (not printed)')
        return
      }
      // A generated key is printed once, to stdout, not through the logger: logs are shipped and kept.
      process.stdout.write(
        `\nmeterd: created the first admin key (id ${record.id}, team ${record.team}). It is shown only this once:\n\n    ${key}\n\n` +
          `Use it as:  curl -H 'x-api-key: ${key}' ...   Create narrower keys with \`meterd keys create\`.\n\n`,
      )
      this.settings.logger.info({ keyId: record.id }, 'created the first admin key (printed on stdout)')
    }
  }

  authenticate(req: AdmissionRequest): Principal | ApiError {
    const key = presentedKey(req)
    if (!key) return missing(req)
    const r = this.keys?.lookup(key)
    if (!r) return unknown()
    let p = this.principals.get(r)
    if (!p) {
      p = Object.freeze({ account: r.account, tenant: r.tenant, team: r.team, environment: r.environment, keyId: r.id, scopes: Object.freeze([...r.scopes]) })
      this.principals.set(r, p)
    }
    return p
  }

  async shutdown(): Promise<void> {}
}

export const apikeysFactory: ExtensionFactory<typeof apikeysDescriptor.schema> = {
  ...apikeysDescriptor,
  create: (settings, config) => new ApiKeys(settings, config),
}
