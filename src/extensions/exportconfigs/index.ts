import { Type, type Static } from '@sinclair/typebox'
import type { Component, CreateSettings, ExtensionFactory, Host } from '../../host/component.js'
import { DestinationGuard } from '../../domain/webhooks/destination.js'
import { DeliveryEngine } from '../../domain/webhooks/engine.js'
import { mountExportConfigurationRoutes } from './api.js'
import { loadOrCreateMasterKey, readMasterKeyFile } from './master-key.js'
import { SecretBox } from './secrets.js'
import { shareChanges } from '../../core/cluster/bus.js'
import { ExportConfigStore } from './store.js'

const schema = Type.Object(
  {
    master_key: Type.String({
      default: '',
      description:
        'Encrypts signing secrets at rest (AES-256-GCM), e.g. ${env:METERD_MASTER_KEY}; empty = a random key generated on first start in master.key in the data directory (storage.path; 0600; back it up with data.mdb)',
    }),
    allow_private_destinations: Type.Array(Type.String(), {
      default: [],
      description: 'Addresses or CIDRs (127.0.0.1, 10.0.0.0/8) webhooks may reach although private, loopback or link-local',
    }),
    retry_schedule_seconds: Type.Array(Type.Number({ minimum: 0 }), {
      default: [0, 5, 300, 1800, 7200, 18000, 36000, 36000],
      minItems: 1,
      description: 'Delay before each attempt (the first is usually 0 = at once); after the last attempt fails, the delivery is dead-lettered',
    }),
    retry_jitter: Type.Number({ default: 0.2, minimum: 0, maximum: 1, description: 'Each retry delay is stretched by up to this fraction, at random' }),
    timeout_ms: Type.Integer({ default: 15000, minimum: 100, maximum: 60000, description: 'Default per-attempt timeout (a configuration may set its own)' }),
    max_concurrency_per_endpoint: Type.Integer({ default: 4, minimum: 1, maximum: 256, description: 'Attempts in flight at once per destination origin' }),
    poll_interval_ms: Type.Integer({ default: 1000, minimum: 10, description: 'How often due retries and batch deadlines are checked' }),
    max_retry_after_seconds: Type.Integer({ default: 86400, minimum: 1, description: 'Upper bound on a receiver\'s Retry-After' }),
    max_configurations_per_team: Type.Integer({
      default: 100,
      minimum: 1,
      description:
        "Most export configurations one team may hold: each usage record is matched against every one of its team's, and queues a delivery for each that wants it in the record's own commit",
    }),
  },
  { additionalProperties: false },
)
type Config = Static<typeof schema>

/**
 * Export configurations (webhooks, DESIGN §7): the CRUD and signing API under
 * /{api_prefix}/v2/api/export-configurations, and the delivery engine that every
 * webhook delivery — usage events from the `webhook` exporter, test events — goes through.
 */
export class ExportConfigurations implements Component {
  store?: ExportConfigStore
  engine?: DeliveryEngine

  constructor(private readonly settings: CreateSettings, private readonly config: Config) {}

  async start(host: Host): Promise<void> {
    const box = this.secretBox(host)
    this.store = new ExportConfigStore(host.store, box)
    if (host.shared) await this.store.share(host.shared.tables)
    // Secrets from older versions (plain) or sealed under a previous key move to the current key.
    const { resealed, unreadable } = await this.store.resealAll()
    if (resealed) this.settings.logger.info({ resealed }, 'webhook signing secrets re-encrypted with the current master key')
    if (unreadable.length)
      this.settings.logger.error(
        { configurations: unreadable },
        'webhook signing secrets that no master key opens (the key changed or master.key was lost): their deliveries fail until the key is restored or the secret is rotated with {"immediate": true}',
      )
    this.engine = new DeliveryEngine(
      host.store,
      this.store,
      {
        retryScheduleMs: this.config.retry_schedule_seconds.map((s) => Math.round(s * 1000)),
        jitterRatio: this.config.retry_jitter,
        timeoutMs: this.config.timeout_ms,
        maxConcurrencyPerEndpoint: this.config.max_concurrency_per_endpoint,
        pollIntervalMs: this.config.poll_interval_ms,
        maxRetryAfterMs: this.config.max_retry_after_seconds * 1000,
        vendorWord: host.server.vendor_word,
        allowPrivateDestinations: this.config.allow_private_destinations,
        claims: host.shared?.deliveries,
      },
      () => host.now(),
      this.settings.logger,
      host.registry,
    )
    mountExportConfigurationRoutes({
      host,
      store: this.store,
      engine: this.engine,
      defaultTimeoutMs: this.config.timeout_ms,
      maxConfigurationsPerTeam: this.config.max_configurations_per_team,
    })
    const store = this.store
    const engine = this.engine
    shareChanges(host.cluster, `${this.settings.id}.changed`, store, () => store.reload())
    // One worker delivers (the leader); the others queue in the shared store and wake it.
    if (host.cluster.leader) host.cluster.subscribe(`${this.settings.id}.kick`, () => engine.kick())
    else engine.follow(() => host.cluster.publish(`${this.settings.id}.kick`, null))
    this.engine.start()
    this.settings.logger.info({ pending: this.engine.queue.depth }, 'webhook delivery engine started')
  }

  /**
   * The configured master key, else the one in <data dir>/master.key (made on first start),
   * so secrets are never stored in clear. A key file left from before a key was configured
   * still opens the secrets it sealed (they are resealed at start).
   */
  private secretBox(host: Host): SecretBox {
    const dataDir = host.store.opts.path
    if (this.config.master_key) {
      let fromFile: string | undefined
      try {
        fromFile = readMasterKeyFile(dataDir)
      } catch (err) {
        // Only secrets sealed before master_key was set need it; those are reported as unreadable below.
        this.settings.logger.warn({ err: (err as Error).message }, 'ignoring a damaged master.key: master_key is configured')
      }
      return new SecretBox(this.config.master_key, fromFile ? [fromFile] : [])
    }
    const { key, created, path } = loadOrCreateMasterKey(dataDir)
    if (created) this.settings.logger.warn({ path }, 'generated a master key for webhook signing secrets: back this file up with data.mdb (without it the secrets must be rotated)')
    return new SecretBox(key)
  }

  async shutdown(): Promise<void> {
    await this.engine?.stop()
  }
}

export const exportconfigsFactory: ExtensionFactory<typeof schema> = {
  kind: 'extension',
  type: 'exportconfigs',
  description: 'Export configurations (webhooks): CRUD, signing-secret rotation, test events and the durable delivery engine',
  schema,
  check(config, ctx) {
    try {
      new DestinationGuard(config.allow_private_destinations)
    } catch (err) {
      ctx.issue('allow_private_destinations', (err as Error).message.replace(/^allow_private_destinations: /, ''))
    }
  },
  create: (settings, config) => new ExportConfigurations(settings, config),
}
