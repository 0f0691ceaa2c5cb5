import type { Component, CreateSettings, ExtensionFactory, Host } from '../../host/component.js'
import { DeliveryEngine } from '../../domain/webhooks/engine.js'
import { mountExportConfigurationRoutes } from './api.js'
import { loadOrCreateMasterKey, readMasterKeyFile } from './master-key.js'
import { SecretBox } from './secrets.js'
import { shareChanges } from '../../core/cluster/bus.js'
import { ExportConfigStore } from './store.js'
import { exportconfigsDescriptor, type Config } from './descriptor.js'

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

export const exportconfigsFactory: ExtensionFactory<typeof exportconfigsDescriptor.schema> = {
  ...exportconfigsDescriptor,
  create: (settings, config) => new ExportConfigurations(settings, config),
}
