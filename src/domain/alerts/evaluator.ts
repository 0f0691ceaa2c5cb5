import type { Logger } from 'pino'
import { newId } from '../../core/ids.js'
import type { UsageRecord } from '../../model/usage-record.js'
import type { WebhookEvent } from '../webhooks/model.js'
import type { Decimal } from '../pricing/money.js'
import type { AlertMeasures, Leadership } from '../../ports/leader.js'
import { judge, matchesFilters, measureSummary, mergeSummaries, summarize, windowsOf, type Summary, type Window } from './measure.js'
import type { AlertEvent, AlertEventKind, AlertRule, AlertState } from './model.js'
import type { AlertStore } from './store.js'

/** The records a rule measures: a team's, by event time in [from, to) (ISO). */
export interface UsageWindowReader {
  inWindow(team: string, from: string, to: string): Iterable<UsageRecord>
}

/**
 * Announces a state change. Called inside the transaction that records it, so the deliveries it
 * queues commit with the change; the function it returns runs once that transaction is on disk.
 */
export interface AlertNotifier {
  inTransaction(rule: AlertRule, event: WebhookEvent): (() => Promise<void>) | undefined
}

export interface EvaluatorDeps {
  store: AlertStore
  usage: UsageWindowReader
  notifier?: AlertNotifier
  now: () => number
  logger: Logger
  /** Counted per change of state. */
  onTransition?: (kind: AlertEventKind) => void
  /**
   * Gateway cluster: every replica measures its own records and publishes the summaries; the
   * replica holding the lease judges each rule on the merge of them all, so a rule fires once
   * for the cluster, on the cluster's records.
   */
  cluster?: ClusterEvaluation
}

export interface ClusterEvaluation {
  replica: string
  leadership: Leadership
  measures: AlertMeasures
  /** How long a replica's published measurement counts (a few evaluation intervals: a dead replica's goes). */
  freshMs: number
}

/** What one replica published for a rule. */
interface Measured {
  at: number
  /** The current window's start (a calendar period's must match the leader's). */
  from: number
  current: Summary
  previous?: Summary
}

const iso = (ms: number) => new Date(ms).toISOString()

/**
 * Evaluates every enabled rule against the stored usage (DESIGN §8): a rule whose condition starts
 * to hold fires `alert.triggered` once; when it stops holding, `alert.resolved` once. The firing
 * state is persisted with each change, in the transaction that queues its webhook deliveries,
 * so neither a restart nor a kill -9 repeats or loses an event. The measured value between
 * changes is kept in memory only (it is measured again at every evaluation).
 */
export class AlertEvaluator {
  /** The latest measurement of each rule. */
  private readonly live = new Map<string, AlertState>()
  private running?: Promise<number>
  private leading = false

  constructor(private readonly d: EvaluatorDeps) {}

  /** What the API shows for a rule: the latest measurement, else the stored state. */
  state(rule: AlertRule): AlertState {
    return this.live.get(rule.id) ?? this.d.store.state(rule.id)
  }

  /** Forgets a rule's measurement (after an edit or a delete). */
  forget(id: string): void {
    this.live.delete(id)
  }

  /** One pass over every enabled rule; resolves with the number of state changes. Passes never overlap. */
  evaluate(): Promise<number> {
    return (this.running ??= this.pass().finally(() => (this.running = undefined)))
  }

  /** Resolves once a pass under way (if any) is done. */
  async idle(): Promise<void> {
    await this.running?.catch(() => undefined)
  }

  private async pass(): Promise<number> {
    const now = this.d.now()
    const cluster = this.d.cluster
    if (cluster) {
      const leading = cluster.leadership.leader
      // A replica that (again) leads starts from the shared state, not from what it measured before.
      if (leading !== this.leading) this.live.clear()
      this.leading = leading
    }
    // Rules of one team over one window read the records once per pass.
    const read = new Map<string, UsageRecord[]>()
    const recordsIn = (team: string, w: Window): UsageRecord[] => {
      const key = `${team}\0${w.from}\0${w.to}`
      let list = read.get(key)
      if (!list) {
        list = []
        for (const r of this.d.usage.inWindow(team, iso(w.from), iso(w.to))) if (r.cost?.metered !== false) list.push(r)
        read.set(key, list)
      }
      return list
    }
    let changes = 0
    for (const rule of [...this.d.store.all()]) {
      if (!rule.enabled) continue
      try {
        if (await this.evaluateRule(rule, now, recordsIn)) changes++
      } catch (err) {
        this.d.logger.error({ err, ruleId: rule.id }, 'alert rule evaluation failed')
      }
    }
    return changes
  }

  private async evaluateRule(rule: AlertRule, now: number, recordsIn: (team: string, w: Window) => UsageRecord[]): Promise<boolean> {
    const windows = windowsOf(rule, now)
    const summary = (w: Window): Summary => summarize(rule.metricType, recordsIn(rule.team, w).filter((r) => matchesFilters(r, rule.filters)))
    let current = summary(windows.current)
    let previous = windows.previous ? summary(windows.previous) : undefined
    const cluster = this.d.cluster
    if (cluster) {
      const merged = await this.merged(cluster, rule, now, { at: now, from: windows.current.from, current, previous })
      if (!merged) return false
      ;({ current, previous } = merged)
    }
    const value = (s: Summary | undefined, w: Window | undefined): Decimal | null | undefined => (s && w ? measureSummary(rule.metricType, s, w) : undefined)
    const verdict = judge(rule, value(current, windows.current)!, value(previous, windows.previous))
    const before = this.state(rule)
    const next: AlertState = {
      ...before,
      currentValue: verdict.value === null ? null : verdict.value.toString(),
      windowFrom: iso(windows.current.from),
      windowTo: iso(windows.current.to),
      evaluatedAt: now,
    }
    let kind: AlertEventKind | undefined
    if (verdict.holds === true && !before.firing) kind = 'alert.triggered'
    else if (verdict.holds === false && before.firing) kind = 'alert.resolved'
    if (!kind) {
      this.live.set(rule.id, next)
      return false
    }
    next.firing = kind === 'alert.triggered'
    next.firingSince = next.firing ? now : null
    const event: WebhookEvent = {
      id: 'evt_' + newId(now),
      type: kind,
      created: iso(now),
      teamId: rule.team,
      data: {
        ruleId: rule.id,
        name: rule.name,
        alertType: rule.alertType,
        metricType: rule.metricType,
        operatorType: rule.operatorType,
        threshold: rule.threshold,
        value: next.currentValue,
        firing: next.firing,
        periodDuration: rule.periodDuration,
        windowSeconds: rule.windowSeconds,
        window: { from: next.windowFrom, to: next.windowTo },
        filters: rule.filters,
      },
    }
    const entry: AlertEvent = {
      id: event.id,
      ruleId: rule.id,
      type: kind,
      at: event.created,
      metricType: rule.metricType,
      operatorType: rule.operatorType,
      value: next.currentValue!,
      threshold: rule.threshold,
      windowFrom: next.windowFrom!,
      windowTo: next.windowTo!,
    }
    const after = await this.d.store.transaction(() => {
      this.d.store.recordInTransaction(rule.id, next, entry)
      return this.d.notifier?.inTransaction(rule, event)
    })
    // Gateway cluster: the other replicas learn the rule's state (a new leader goes on from it).
    if (cluster) await this.d.store.shareState(rule.id, entry)
    this.live.set(rule.id, next)
    this.d.onTransition?.(kind)
    this.d.logger.info({ ruleId: rule.id, event: kind, value: next.currentValue, threshold: rule.threshold }, kind === 'alert.triggered' ? 'alert triggered' : 'alert resolved')
    await after?.().catch((err) => this.d.logger.warn({ err, ruleId: rule.id }, 'alert delivery kick failed'))
    return true
  }

  /**
   * Publishes this replica's measurement; on the leader, resolves with the merge of every
   * replica's fresh one, elsewhere (or when the shared store cannot be reached) with undefined:
   * nothing is judged.
   */
  private async merged(cluster: ClusterEvaluation, rule: AlertRule, now: number, mine: Measured): Promise<{ current: Summary; previous?: Summary } | undefined> {
    let all: Measured[]
    try {
      await cluster.measures.publish(rule.id, cluster.replica, JSON.stringify(mine), cluster.freshMs)
      if (!cluster.leadership.leader) return undefined
      all = (await cluster.measures.gather(rule.id)).map((v) => JSON.parse(v) as Measured)
    } catch {
      return undefined // counted and logged once per outage by the shared state
    }
    const fresh = all.filter((m) => now - m.at <= cluster.freshMs && (rule.alertType !== 'CUMULATIVE_USAGE' || m.from === mine.from))
    return {
      current: mergeSummaries(fresh.map((m) => m.current)),
      previous: mine.previous && mergeSummaries(fresh.flatMap((m) => (m.previous ? [m.previous] : []))),
    }
  }
}
