import { randomBytes } from 'node:crypto'
import type { Database } from 'lmdb'
import type { Replaced, SharedTables, TableView } from '../../ports/tables.js'
import type { Store } from '../../store/store.js'
import { INITIAL_STATE, type AlertEvent, type AlertRule, type AlertState } from './model.js'

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

function shortId(): string {
  let s = ''
  for (const b of randomBytes(6)) s += BASE62[b % 62]
  return s
}

type EventKey = [string, number, string]

const eventKey = (ruleId: string, e: AlertEvent): EventKey => [ruleId, Date.parse(e.at), e.id]

/**
 * Alert rules, their firing state and their history in LMDB. A state change and its history
 * entry are written in the same transaction as the webhook deliveries that announce it
 * (AlertEvaluator), so after a crash an alert has fired and been queued for delivery, or neither.
 * Rules are few: all of them are also kept in memory, by id.
 */
export class AlertStore {
  private readonly rules: Database<AlertRule, string>
  private readonly states: Database<AlertState, string>
  private readonly events: Database<AlertEvent, EventKey>
  private readonly byId = new Map<string, AlertRule>()
  private shared?: SharedTables
  /** Rules, states and history as they are read: in a gateway cluster, another replica's change before it is committed here. */
  private readonly shownRules: TableView<string, AlertRule>
  private readonly shownStates: TableView<string, AlertState>
  private readonly shownEvents: TableView<EventKey, AlertEvent>
  /** Called after every rule change this process commits (the other workers then reload()). */
  onChange?: () => void

  constructor(private readonly store: Store) {
    this.rules = store.db('alert-rules')
    this.states = store.db('alert-state')
    this.events = store.db('alert-events')
    this.shownRules = store.view('alert-rules')
    this.shownStates = store.view('alert-state')
    this.shownEvents = store.view('alert-events')
    this.reload()
  }

  /** Re-reads every rule from LMDB: another process changed one. */
  reload(): void {
    this.store.readLatest()
    this.byId.clear()
    for (const { value } of this.shownRules.range()) this.byId.set(value.id, value)
  }

  /**
   * Gateway cluster: rules are shared with the other replicas, and so are their state and
   * history, which the replica leading the cluster writes (AlertEvaluator): the next leader goes
   * on from them.
   */
  async share(tables: SharedTables): Promise<void> {
    this.shared = tables
    await tables.attach([
      { db: 'alert-rules', changed: () => this.reload() },
      { db: 'alert-state', changed: () => {} },
      // The history is read through its view: nothing to reload when an event arrives.
      { db: 'alert-events', changed: () => {} },
    ])
  }

  /** A state change (and its history entry) the leader committed, to the other replicas. */
  async shareState(ruleId: string, event?: AlertEvent): Promise<void> {
    await this.shared?.wrote('alert-state', [ruleId])
    if (event) await this.shared?.wrote('alert-events', [eventKey(ruleId, event)])
  }

  /** A new rule id, unused so far. */
  newId(): string {
    for (;;) {
      const id = shortId()
      if (!this.byId.has(id)) return id
    }
  }

  all(): IterableIterator<AlertRule> {
    return this.byId.values()
  }

  forTeam(team: string): AlertRule[] {
    return [...this.byId.values()].filter((r) => r.team === team).sort((a, b) => (a.createdAt < b.createdAt ? -1 : a.createdAt > b.createdAt ? 1 : a.id < b.id ? -1 : 1))
  }

  get(id: string): AlertRule | undefined {
    return this.byId.get(id)
  }

  /** A rule of `team`, or undefined (another team's rule is as unknown as a missing one). */
  getForTeam(id: string, team: string): AlertRule | undefined {
    const r = this.byId.get(id)
    return r && r.team === team ? r : undefined
  }

  state(id: string): AlertState {
    return this.shownStates.get(id) ?? INITIAL_STATE
  }

  /**
   * Stores a new rule unless its team already holds `maxPerTeam`, and returns it (undefined
   * then). Counted in the write transaction, so creations on several workers at once stop at the
   * limit too; in a gateway cluster, by Redis for every replica (SharedTables.replaceRows), which
   * also makes the rule's id new in the cluster (another one is drawn if a replica just took it).
   */
  async put(rule: AlertRule, maxPerTeam = Infinity): Promise<AlertRule | undefined> {
    if (this.shared) {
      const limit = maxPerTeam === Infinity ? undefined : { team: rule.team, max: maxPerTeam }
      for (;;) {
        const done = await this.shared.replaceRows([{ db: 'alert-rules', key: rule.id, read: undefined, value: rule }], limit)
        if (done.outcome === 'limited') return undefined
        if (done.outcome === 'replaced') break
        rule = { ...rule, id: this.newId() }
      }
    } else {
      const stored = await this.store.durable(
        this.store.root.transaction(() => {
          if (this.store.teamHolds(this.rules, rule.team, maxPerTeam)) return false
          this.rules.put(rule.id, rule)
          return true
        }),
      )
      if (!stored) return undefined
    }
    this.byId.set(rule.id, rule)
    this.onChange?.()
    return rule
  }

  /**
   * Writes a change `rule` to the rule as it was `read`, only if it is still so (in the write
   * transaction: Store.replaceExisting): `gone` when a DELETE committed meanwhile, `changed` with
   * the rule as it is now when another worker or replica changed it meanwhile (the caller merges
   * over that and tries again).
   */
  async update(rule: AlertRule, read: AlertRule): Promise<Replaced<AlertRule>> {
    // Gateway cluster: checked against what every replica wrote (Redis), not this replica's copy.
    const done = this.shared ? await this.shared.replace('alert-rules', rule.id, read, rule) : await this.store.replaceExisting(this.rules, rule.id, read, rule)
    if (done.outcome !== 'replaced') return done
    // As it is now, read back after the commit: another worker's change committed meanwhile may
    // already have been reloaded here, and must not be replaced by this older copy.
    const latest = this.shownRules.get(rule.id)
    if (latest) this.byId.set(rule.id, latest)
    else this.byId.delete(rule.id)
    this.onChange?.()
    return done
  }

  /** Removes a rule with its state and history. */
  async remove(rule: AlertRule): Promise<void> {
    await this.shared?.writable()
    const events: EventKey[] = []
    await this.store.durable(
      this.store.root.transaction(() => {
        this.rules.remove(rule.id)
        this.states.remove(rule.id)
        for (const key of this.events.getKeys({ start: [rule.id, 0, ''], end: [rule.id, Number.MAX_SAFE_INTEGER, '\uffff'] })) {
          this.events.remove(key)
          events.push(key)
        }
      }),
    )
    this.byId.delete(rule.id)
    await this.shared?.wrote('alert-rules', [rule.id])
    await this.shared?.wrote('alert-state', [rule.id])
    if (events.length) await this.shared?.wrote('alert-events', events)
    this.onChange?.()
  }

  /** Inside a write transaction: the rule's new state, and the history entry of the event that changed it. */
  recordInTransaction(ruleId: string, state: AlertState, event?: AlertEvent): void {
    this.states.put(ruleId, state)
    if (event) this.events.put(eventKey(ruleId, event), event)
  }

  async setState(ruleId: string, state: AlertState): Promise<void> {
    await this.store.durable(this.states.put(ruleId, state))
    await this.shared?.wrote('alert-state', [ruleId])
  }

  /** A rule's history, newest first. */
  history(ruleId: string, offset: number, limit: number): { items: AlertEvent[]; total: number } {
    const rows = [...this.shownEvents.range({ start: [ruleId, 0, ''], end: [ruleId, Number.MAX_SAFE_INTEGER, '\uffff'] })]
    // The view gives another replica's events not yet committed here after the others: sorted
    // by time, then id, newest first.
    rows.sort((a, b) => b.key[1] - a.key[1] || (a.key[2] < b.key[2] ? 1 : a.key[2] > b.key[2] ? -1 : 0))
    return { items: rows.slice(offset, offset + limit).map((r) => r.value), total: rows.length }
  }

  /** Runs `fn` in one write transaction and resolves once it is on disk. */
  transaction<T>(fn: () => T): Promise<T> {
    return this.store.durable(this.store.root.transaction(fn))
  }
}
