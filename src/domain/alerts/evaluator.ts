import type { Logger } from 'pino'
import { newId } from '../../core/ids.js'
import type { UsageRecord } from '../../model/usage-record.js'
import type { WebhookEvent } from '../webhooks/model.js'
import type { Decimal } from '../pricing/money.js'
import { judge, matchesFilters, measure, windowsOf, type Window } from './measure.js'
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
    const value = (w: Window): Decimal | null => measure(rule.metricType, recordsIn(rule.team, w).filter((r) => matchesFilters(r, rule.filters)), w)
    const verdict = judge(rule, value(windows.current), windows.previous ? value(windows.previous) : undefined)
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
    this.live.set(rule.id, next)
    this.d.onTransition?.(kind)
    this.d.logger.info({ ruleId: rule.id, event: kind, value: next.currentValue, threshold: rule.threshold }, kind === 'alert.triggered' ? 'alert triggered' : 'alert resolved')
    await after?.().catch((err) => this.d.logger.warn({ err, ruleId: rule.id }, 'alert delivery kick failed'))
    return true
  }
}
