import type { Component, CreateSettings, ExtensionFactory, Host } from '../../host/component.js'
import { sharedCounter } from '../../core/telemetry.js'
import { shareChanges } from '../../core/cluster/bus.js'
import { AlertEvaluator } from '../../domain/alerts/evaluator.js'
import { AlertStore } from '../../domain/alerts/store.js'
import { ExportConfigurations } from '../exportconfigs/index.js'
import { WebhookNotifier } from './notifier.js'
import { mountAlertRoutes } from './routes.js'
import { alertsDescriptor, type Config } from './descriptor.js'

/**
 * Cost and performance alerts (DESIGN §8): rule CRUD and history at
 * /{api_prefix}/v2/api/sources/ai/anomaly (platform bucket), and the evaluator that fires
 * `alert.triggered` / `alert.resolved` through the webhook delivery engine.
 */
export class AlertsExtension implements Component {
  store?: AlertStore
  evaluator?: AlertEvaluator
  private timer?: NodeJS.Timeout

  constructor(private readonly settings: CreateSettings, private readonly config: Config) {}

  async start(host: Host): Promise<void> {
    const store = new AlertStore(host.store)
    if (host.shared) await store.share(host.shared.tables)
    const ext = host.getExtension(this.config.export_configurations)
    const notifier = ext instanceof ExportConfigurations && ext.store && ext.engine ? new WebhookNotifier(ext.store, ext.engine, store) : undefined
    if (!notifier) this.settings.logger.warn({ extension: this.config.export_configurations }, 'no exportconfigs extension: alert events are recorded but not delivered')
    const transitions = sharedCounter(this.settings.registry, 'meterd_alert_events_total', 'Alert state changes, by event type', ['type'])
    const intervalMs = this.config.evaluation_interval_seconds * 1000
    // Gateway cluster: each replica's worker leader measures its records; the replica holding the
    // cluster lease judges every rule on all of them (docs/deployment.md).
    const cluster =
      host.shared && host.cluster.leader
        ? { replica: host.shared.replica, leadership: host.shared.lead(), measures: host.shared.alertMeasures, freshMs: Math.max(3 * intervalMs, 1000) }
        : undefined
    this.evaluator = new AlertEvaluator({
      cluster,
      store,
      usage: host.usage,
      notifier,
      now: () => host.now(),
      logger: this.settings.logger,
      onTransition: (kind) => transitions.inc({ type: kind }),
    })
    this.store = store
    mountAlertRoutes({ host, store, evaluator: this.evaluator, maxRulesPerTeam: this.config.max_rules_per_team, notifier })
    shareChanges(host.cluster, `${this.settings.id}.changed`, store, () => store.reload())
    // Rules are evaluated by one worker (the leader), so each transition fires once (and, in a
    // gateway cluster, judged by one replica).
    if (!host.cluster.leader) return
    this.timer = setInterval(() => {
      this.evaluator!.evaluate().catch((err) => this.settings.logger.error({ err }, 'alert evaluation failed'))
    }, intervalMs)
    this.timer.unref()
  }

  async shutdown(): Promise<void> {
    if (this.timer) clearInterval(this.timer)
    await this.evaluator?.idle()
  }
}

export const alertsFactory: ExtensionFactory<typeof alertsDescriptor.schema> = {
  ...alertsDescriptor,
  create: (settings, config) => new AlertsExtension(settings, config),
}
