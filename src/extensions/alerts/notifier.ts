import type { AlertNotifier } from '../../domain/alerts/evaluator.js'
import type { AlertRule } from '../../domain/alerts/model.js'
import type { AlertStore } from '../../domain/alerts/store.js'
import type { DeliveryEngine } from '../../domain/webhooks/engine.js'
import type { ConfigurationSource, Delivery, ExportConfiguration, WebhookEvent } from '../../domain/webhooks/model.js'
import type { ExportConfigStore } from '../exportconfigs/store.js'

/** Deliveries to a rule's Slack targets carry configIds `slack_<ruleId>_<index>`. */
const SLACK = 'slack_'

/**
 * Alert events go out through the webhook delivery engine, in the transaction that records them:
 * signed like every event to the rule's webhookConfigurations (or, when it lists none, to every
 * enabled configuration of its team subscribed to the event type), and as a plain Slack message
 * to each of its Slack incoming webhooks (unsigned: Slack does not verify).
 */
export class WebhookNotifier implements AlertNotifier {
  constructor(
    private readonly configs: ExportConfigStore,
    private readonly engine: DeliveryEngine,
    private readonly rules?: AlertStore,
  ) {
    if (rules) engine.addSource(SLACK, new SlackTargets(rules))
  }

  /** Refuses (DestinationRefused) a Slack URL the delivery engine would refuse: the webhooks' SSRF guard, names resolved now. */
  checkDestination(url: string): Promise<void> {
    return this.engine.guard.check(new URL(url))
  }

  /** Whether `id` is an export configuration of `team`. */
  knows(team: string, id: string): boolean {
    return this.configs.getForTeam(id, team) !== undefined
  }

  /** The export configurations a rule's events go to. */
  targets(rule: AlertRule, type: WebhookEvent['type']): ExportConfiguration[] {
    if (rule.webhookConfigurations.length > 0)
      return rule.webhookConfigurations.map((id) => this.configs.getForTeam(id, rule.team)).filter((c): c is ExportConfiguration => c !== undefined && c.enabled)
    return this.configs.forTeam(rule.team).filter((c) => c.enabled && c.eventTypes.includes(type as never))
  }

  inTransaction(rule: AlertRule, event: WebhookEvent): () => Promise<void> {
    const after = this.engine.enqueueInTransaction(this.targets(rule, event.type).map((config) => ({ config, event })))
    if (rule.slackConfigurations.length > 0) {
      const text = slackText(rule, event)
      const deliveries: Delivery[] = rule.slackConfigurations.map((target, i) => {
        const d = this.engine.newDelivery(slackConfig(rule, i, target.webhookUrl), event)
        d.body = JSON.stringify(target.channel ? { text, channel: target.channel } : { text })
        return d
      })
      this.engine.queue.putInTransaction(deliveries, [])
    }
    return after
  }
}

function slackConfig(rule: AlertRule, index: number, url: string): ExportConfiguration {
  return {
    id: `${SLACK}${rule.id}_${index}`,
    team: rule.team,
    name: `${rule.name} (Slack)`,
    url,
    enabled: true,
    eventTypes: ['alert.triggered', 'alert.resolved'],
    filters: {},
    batching: null,
    timeoutMs: null,
    createdAt: rule.createdAt,
    updatedAt: rule.updatedAt,
  }
}

/** The destination of a Slack delivery, looked up again at each attempt (a deleted rule's deliveries are dropped). */
class SlackTargets implements ConfigurationSource {
  constructor(private readonly rules: AlertStore) {}

  get(id: string): ExportConfiguration | undefined {
    const m = /^slack_(.+)_(\d+)$/.exec(id)
    const rule = m ? this.rules.get(m[1]) : undefined
    const target = rule?.slackConfigurations[Number(m![2])]
    return rule && target ? slackConfig(rule, Number(m![2]), target.webhookUrl) : undefined
  }

  signingSecrets(): undefined {
    return undefined
  }

  async disable(): Promise<void> {}
}

/** A one-line Slack message: what crossed, by how much, and where to look. */
export function slackText(rule: AlertRule, event: WebhookEvent): string {
  const d = event.data as { value: string | null; threshold: string; window: { from: string; to: string } }
  const state = event.type === 'alert.triggered' ? ':rotating_light: Alert triggered' : ':white_check_mark: Alert resolved'
  return `${state}: *${rule.name}* — ${rule.metricType} ${d.value ?? 'n/a'} (${rule.operatorType} ${d.threshold}) over ${d.window.from} – ${d.window.to} [rule ${rule.id}]`
}
