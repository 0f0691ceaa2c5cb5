import type { Host } from '../../host/component.js'
import { ApiError, invalid, notFound } from '../../core/errors.js'
import type { AlertEvaluator } from '../../domain/alerts/evaluator.js'
import { INITIAL_STATE, type AlertRule, type AlertState } from '../../domain/alerts/model.js'
import { parseRule } from '../../domain/alerts/parse.js'
import { withoutOwnIdentity } from '../../domain/ingest/identity.js'
import { KeyedSerial } from '../../core/serial.js'
import { DestinationRefused } from '../../domain/webhooks/destination.js'
import type { AlertStore } from '../../domain/alerts/store.js'
import { checkTeam, halPage, paging } from '../../transport/http/query.js'
import type { Reply, RequestContext } from '../../transport/http/server.js'
import type { WebhookNotifier } from './notifier.js'

export interface AlertRouteDeps {
  host: Host
  store: AlertStore
  evaluator: AlertEvaluator
  maxRulesPerTeam: number
  notifier?: WebhookNotifier
}

const num = (v: string | null): number | null => (v === null ? null : Number(v))

/**
 * A rule as every answer shows it, in the shape the vendor's CLI reads: `threshold` and
 * `currentValue` as JSON numbers (events carry the exact decimal strings), `firing` from the
 * evaluator.
 */
export function ruleView(rule: AlertRule, state: AlertState) {
  return {
    id: rule.id,
    teamId: rule.team,
    name: rule.name,
    description: rule.description,
    alertType: rule.alertType,
    metricType: rule.metricType,
    operatorType: rule.operatorType,
    threshold: Number(rule.threshold),
    periodDuration: rule.periodDuration,
    windowSeconds: rule.windowSeconds,
    budgetThreshold: num(rule.budgetThreshold),
    currency: rule.currency,
    filters: rule.filters.map((f) => (f.operator === 'IN' ? { dimension: f.dimension, operator: f.operator, values: f.values } : { dimension: f.dimension, operator: f.operator, value: f.values[0] })),
    notificationAddresses: rule.notificationAddresses,
    slackConfigurations: rule.slackConfigurations,
    webhookConfigurations: rule.webhookConfigurations,
    enabled: rule.enabled,
    firing: state.firing,
    currentValue: num(state.currentValue),
    evaluatedAt: state.evaluatedAt === null ? null : new Date(state.evaluatedAt).toISOString(),
    firingSince: state.firingSince === null ? null : new Date(state.firingSince).toISOString(),
    created: rule.createdAt,
    updated: rule.updatedAt,
  }
}

/**
 * `/{api_prefix}/v2/api/sources/ai/anomaly` (platform bucket): alert rules of the key's team —
 * list, create, read, replace (PUT; fields left out keep their values), delete — and each rule's
 * history at `…/{id}/events`.
 */
export function mountAlertRoutes(d: AlertRouteDeps): void {
  const { host, store, evaluator } = d
  const base = `/${host.server.api_prefix}/v2/api/sources/ai/anomaly`
  const writes = new KeyedSerial()
  const route = (method: 'GET' | 'POST' | 'PUT' | 'DELETE', path: string, scope: 'platform:read' | 'platform:write', handler: (ctx: RequestContext) => Promise<Reply> | Reply) =>
    host.http.route({ method, path: base + path, bucket: 'platform', scope, handler })
  const load = (ctx: RequestContext): AlertRule => {
    const rule = store.getForTeam(ctx.params.id, checkTeam(ctx))
    if (!rule) throw notFound(`no alert rule ${ctx.params.id}`, 'id')
    return rule
  }
  const iso = () => new Date(host.now()).toISOString()
  const checkWebhooks = async (rule: Pick<AlertRule, 'webhookConfigurations' | 'slackConfigurations'>, team: string, current?: AlertRule) => {
    rule.webhookConfigurations.forEach((id, i) => {
      // An id the rule already holds is not judged again: its configuration may have been deleted
      // since, and a PUT that only disables the rule (or the CLI's get → merge → put) must still pass.
      if (current?.webhookConfigurations.includes(id)) return
      if (d.notifier && !d.notifier.knows(team, id))
        throw invalid('unknown_export_configuration', `no export configuration ${id} in this team`, `webhookConfigurations[${i}]`)
    })
    // Slack targets go through the same SSRF guard as export configurations, at creation too.
    for (const [i, target] of rule.slackConfigurations.entries()) {
      await d.notifier?.checkDestination(target.webhookUrl).catch((err) => {
        if (err instanceof DestinationRefused)
          throw invalid('destination_refused', `slackConfigurations[${i}] is refused: ${err.message} (allow it with exportconfigs.allow_private_destinations)`, `slackConfigurations[${i}]`)
        throw err
      })
    }
  }

  route('GET', '', 'platform:read', (ctx) => {
    const team = checkTeam(ctx)
    const { page, size } = paging(ctx)
    const all = store.forTeam(team)
    const items = all.slice(page * size, page * size + size).map((r) => ruleView(r, evaluator.state(r)))
    return { status: 200, body: halPage('aIAnomalyResourceList', items, all.length, page, size) }
  })

  route('POST', '', 'platform:write', async (ctx) => {
    const team = checkTeam(ctx)
    const body = await ctx.json()
    // A body may repeat the key's identity (`teamId` as a GET shows it), never name another team: 403.
    withoutOwnIdentity(body, ctx.principal!)
    const fields = parseRule(body)
    const tooMany = () => invalid('too_many_rules', `a team holds at most ${d.maxRulesPerTeam} alert rules (alerts.max_rules_per_team)`, undefined, 422)
    // The early answer; the count that holds (a burst, several workers or replicas) is made as it is stored (store.put).
    if (store.forTeam(team).length >= d.maxRulesPerTeam) throw tooMany()
    await checkWebhooks(fields, team)
    const now = iso()
    const rule: AlertRule = { id: store.newId(), team, ...fields, createdAt: now, updatedAt: now }
    const stored = await store.put(rule, d.maxRulesPerTeam)
    if (!stored) throw tooMany()
    // Location names the created rule (RFC 9110 §15.3.2), not the collection POSTed to.
    return { status: 201, body: ruleView(stored, INITIAL_STATE), headers: { location: `${base}/${stored.id}` } }
  })

  route('GET', '/:id', 'platform:read', (ctx) => {
    const rule = load(ctx)
    return { status: 200, body: ruleView(rule, evaluator.state(rule)) }
  })

  route('PUT', '/:id', 'platform:write', async (ctx) => {
    load(ctx)
    const body = await ctx.json()
    // One change of a rule at a time in this process, each merged over the rule as the one before
    // left it; read after the body, so a deletion committed meanwhile is a 404. Another worker's
    // change committed after the read is found in the write's transaction, and this one is merged
    // over it again.
    return writes.run(ctx.params.id, async () => {
      let current = load(ctx)
      withoutOwnIdentity(body, ctx.principal!)
      for (;;) {
        const fields = parseRule(body, current)
        await checkWebhooks(fields, current.team, current)
        const rule: AlertRule = { ...current, ...fields, updatedAt: iso() }
        const done = await store.update(rule, current)
        if (done.outcome === 'gone') throw notFound(`no alert rule ${ctx.params.id}`, 'id')
        if (done.outcome === 'changed') {
          current = done.now
          continue
        }
        // A changed rule is measured afresh; a disabled one stops firing without an event (docs/alerts.md).
        evaluator.forget(rule.id)
        if (!rule.enabled && evaluator.state(rule).firing) await store.setState(rule.id, INITIAL_STATE)
        return { status: 200, body: ruleView(rule, evaluator.state(rule)) }
      }
    })
  })

  route('DELETE', '/:id', 'platform:write', (ctx) =>
    writes.run(ctx.params.id, async () => {
      const rule = load(ctx)
      await store.remove(rule)
      evaluator.forget(rule.id)
      return { status: 200, body: { id: rule.id, deleted: true } }
    }),
  )

  route('GET', '/:id/events', 'platform:read', (ctx) => {
    const rule = load(ctx)
    const { page, size } = paging(ctx)
    const { items, total } = store.history(rule.id, page * size, size)
    return { status: 200, body: halPage('aIAnomalyEventResourceList', items, total, page, size) }
  })
}
