import type { Database } from 'lmdb'
import type { Replaced, RowChange, SharedTables, TableView } from '../../ports/tables.js'
import type { Store } from '../../store/store.js'
import type { ConfigurationSource, ExportConfiguration } from '../../domain/webhooks/model.js'
import { SecretBox, SecretUnreadable, rotate, statusOf, newSecret, type SealedSecret, type SigningState, type SigningStatus } from './secrets.js'

/**
 * Export configurations in LMDB (`export_configurations`), their signing state apart
 * (`export_configuration_signing`) so no read of a configuration ever touches a secret.
 * An in-memory index by team serves the exporter's hot path.
 */
export class ExportConfigStore implements ConfigurationSource {
  private readonly configs: Database<ExportConfiguration, string>
  private readonly signing: Database<SigningState, string>
  private readonly byTeam = new Map<string, ExportConfiguration[]>()
  private shared?: SharedTables
  /** Both tables as they are read: in a gateway cluster, another replica's change before it is committed here. */
  private readonly shownConfigs: TableView<string, ExportConfiguration>
  private readonly shownSigning: TableView<string, SigningState>
  /** Called after every change this process commits (the other workers then reload()). */
  onChange?: () => void

  constructor(private readonly store: Store, private readonly box: SecretBox) {
    this.configs = store.db('export_configurations')
    this.signing = store.db('export_configuration_signing')
    this.shownConfigs = store.view('export_configurations')
    this.shownSigning = store.view('export_configuration_signing')
    this.reload()
  }

  /** Rebuilds the index by team from LMDB: another process changed a configuration. */
  reload(): void {
    this.store.readLatest()
    this.byTeam.clear()
    for (const { value } of this.shownConfigs.range()) this.index(value)
  }

  /** Gateway cluster: configurations (and their sealed signing secrets) are shared with the other replicas. */
  async share(tables: SharedTables): Promise<void> {
    this.shared = tables
    await tables.attach([
      { db: 'export_configurations', changed: () => this.reload() },
      { db: 'export_configuration_signing', changed: () => undefined },
    ])
  }

  private index(c: ExportConfiguration): void {
    const list = (this.byTeam.get(c.team) ?? []).filter((x) => x.id !== c.id)
    list.push(c)
    this.byTeam.set(c.team, list)
  }

  /**
   * Indexes `c` as it is now, read back after its commit: another worker's change committed
   * meanwhile may already have been reloaded here, and must not be replaced by this older copy.
   */
  private indexLatest(c: ExportConfiguration): void {
    const latest = this.get(c.id)
    if (latest) this.index(latest)
    else this.unindex(c)
  }

  private unindex(c: ExportConfiguration): void {
    this.byTeam.set(c.team, (this.byTeam.get(c.team) ?? []).filter((x) => x.id !== c.id))
  }

  get(id: string): ExportConfiguration | undefined {
    return this.shownConfigs.get(id)
  }

  /** The signing state this replica goes by (another replica's change first, in a gateway cluster). */
  private signingOf(id: string): SigningState | undefined {
    return this.shownSigning.get(id)
  }

  /** A configuration of `team`, or undefined (another team's id is as unknown as a missing one). */
  getForTeam(id: string, team: string): ExportConfiguration | undefined {
    const c = this.get(id)
    return c && c.team === team ? c : undefined
  }

  forTeam(team: string): readonly ExportConfiguration[] {
    return this.byTeam.get(team) ?? []
  }

  /**
   * Writes a change `c` to the configuration as it was `read`, only if it is still so (in the
   * write transaction: Store.replaceExisting): `gone` when a DELETE committed meanwhile (nothing
   * comes back without its signing secret), `changed` with the configuration as it is now when
   * another worker or replica changed it meanwhile (the caller merges over that and tries again).
   */
  async update(c: ExportConfiguration, read: ExportConfiguration): Promise<Replaced<ExportConfiguration>> {
    if (!this.shared) return this.replace(c, read)
    // Gateway cluster: checked against what every replica wrote (Redis), not this replica's copy.
    const done = await this.shared.replace('export_configurations', c.id, read, c)
    if (done.outcome === 'replaced') {
      this.indexLatest(c)
      this.onChange?.()
    }
    return done
  }

  /** update() without asking Redis first: the delivery engine's own change (disable) is made even while Redis is down. */
  private async replace(c: ExportConfiguration, read: ExportConfiguration): Promise<Replaced<ExportConfiguration>> {
    const done = await this.store.replaceExisting(this.configs, c.id, read, c)
    if (done.outcome !== 'replaced') return done
    this.indexLatest(c)
    await this.shared?.wrote('export_configurations', [c.id])
    this.onChange?.()
    return done
  }

  /**
   * Stores a new configuration, with a new signing secret when `signed`, in one commit (so a
   * configuration never exists unsigned by accident), unless its team already holds `maxPerTeam`
   * (counted in the write transaction, so creations on several workers at once stop at the limit
   * too; in a gateway cluster, by Redis for every replica: SharedTables.replaceRows). The secret
   * is returned, to be shown once.
   */
  async create(c: ExportConfiguration, signed: boolean, now: number, maxPerTeam = Infinity): Promise<{ created: false } | { created: true; secret?: string }> {
    const secret = signed ? newSecret() : undefined
    const signing = secret ? rotate(undefined, this.box.seal(secret, c.id), { immediate: true, now }) : undefined
    if (this.shared) {
      const rows: RowChange[] = [{ db: 'export_configurations', key: c.id, read: undefined, value: c }]
      if (signing) rows.push({ db: 'export_configuration_signing', key: c.id, read: undefined, value: signing })
      const done = await this.shared.replaceRows(rows, maxPerTeam === Infinity ? undefined : { team: c.team, max: maxPerTeam })
      if (done.outcome === 'limited') return { created: false }
      // A new id (a ULID) held by another configuration already: never in practice.
      if (done.outcome === 'changed') throw new Error(`export configuration ${c.id} exists already`)
    } else {
      const created = await this.store.durable(
        this.store.root.transaction(() => {
          if (this.store.teamHolds(this.configs, c.team, maxPerTeam)) return false
          this.configs.put(c.id, c)
          if (signing) this.signing.put(c.id, signing)
          return true
        }),
      )
      if (!created) return { created: false }
    }
    this.index(c)
    this.onChange?.()
    return { created: true, secret }
  }

  async remove(c: ExportConfiguration): Promise<void> {
    await this.shared?.writable()
    await this.store.durable(
      this.store.root.transaction(() => {
        this.configs.remove(c.id)
        this.signing.remove(c.id)
      }),
    )
    this.unindex(c)
    await this.shared?.wrote('export_configurations', [c.id])
    await this.shared?.wrote('export_configuration_signing', [c.id])
    this.onChange?.()
  }

  async disable(id: string, reason: string): Promise<void> {
    // Over the configuration as it is when the write commits: a PATCH committed meanwhile (on
    // another worker too) keeps its change, and a deletion stands.
    for (let c = this.get(id); c?.enabled; ) {
      const done = await this.replace({ ...c, enabled: false, disabledReason: reason, updatedAt: new Date().toISOString() }, c)
      if (done.outcome !== 'changed') return
      c = done.now
    }
  }

  signingState(id: string): SigningState | undefined {
    return this.signingOf(id)
  }

  /** What an API response may show about signing: never a secret. */
  signingView(id: string, now: number): { enabled: boolean; state: SigningStatus; secretCreatedAt?: string; overlapEndsAt?: string } {
    const s = this.signingOf(id)
    const state = statusOf(s, now)
    return {
      enabled: state !== 'off',
      state,
      ...(s?.currentCreatedAt !== undefined && state !== 'off' ? { secretCreatedAt: new Date(s.currentCreatedAt).toISOString() } : {}),
      ...(state === 'overlap' ? { overlapEndsAt: new Date(s!.previousExpiresAt!).toISOString() } : {}),
    }
  }

  /**
   * Seals every stored secret with the current master key: plain ones from older versions and
   * ones sealed under a previous key. Returns how many were resealed and the configurations
   * whose current secret no key opens (they must be rotated).
   */
  async resealAll(): Promise<{ resealed: number; unreadable: string[] }> {
    let resealed = 0
    const unreadable = new Set<string>()
    const updates: [string, SigningState][] = []
    for (const { key: id, value } of this.signing.getRange({})) {
      const next = { ...value }
      for (const field of ['current', 'previous'] as const) {
        const sealed = value[field]
        if (!sealed) continue
        const r = this.box.reseal(sealed, id)
        // An unreadable previous secret is only left out of the overlap; an unreadable current one stops signing.
        if (r.unreadable && field === 'current') unreadable.add(id)
        if (r.sealed) {
          next[field] = r.sealed
          resealed++
        }
      }
      if (next.current !== value.current || next.previous !== value.previous) updates.push([id, next])
    }
    if (updates.length) {
      await this.store.durable(this.store.root.transaction(() => updates.forEach(([id, s]) => this.signing.put(id, s))))
      await this.shared?.wrote('export_configuration_signing', updates.map(([id]) => id))
    }
    return { resealed, unreadable: [...unreadable] }
  }

  private readable(s: SealedSecret | undefined, id: string): boolean {
    if (!s) return false
    try {
      this.box.open(s, id)
      return true
    } catch (err) {
      if (err instanceof SecretUnreadable) return false
      throw err
    }
  }

  /** Rotates (or first enables) signing; the returned secret is shown to the caller once and kept only sealed. */
  async rotate(id: string, immediate: boolean, now: number): Promise<string | undefined> {
    const secret = newSecret()
    const sealed = this.box.seal(secret, id)
    await this.shared?.writable()
    // The state is read inside the write transaction: two rotations (or a rotation and a
    // PATCH of signingEnabled) at once each build on the other's result, so no secret answered
    // 200 is overwritten. A configuration deleted meanwhile gets no secret.
    const kept = await this.store.durable(
      this.store.root.transaction(() => {
        if (this.configs.get(id) === undefined) return false
        const state = this.live(this.signingOf(id), now)
        // A current secret no key opens cannot sign an overlap: the rotation is then immediate.
        const atOnce = immediate || Boolean(state?.current && !this.readable(state.current, id))
        this.signing.put(id, rotate(state, sealed, { immediate: atOnce, now }))
        return true
      }),
    )
    if (!kept) return undefined
    await this.shared?.wrote('export_configuration_signing', [id])
    return secret
  }

  /** Turns signing off or back on without a new secret (on needs a secret made by rotate before). */
  async setSigningEnabled(id: string, enabled: boolean): Promise<boolean> {
    const s = this.signingOf(id)
    if (enabled && !s?.current) return false
    if (s) {
      await this.shared?.writable()
      // Read again in the transaction: a rotation committed meanwhile keeps its new secret.
      await this.store.durable(
        this.store.root.transaction(() => {
          const latest = this.signingOf(id)
          if (latest) this.signing.put(id, { ...latest, enabled })
        }),
      )
      await this.shared?.wrote('export_configuration_signing', [id])
    }
    return true
  }

  /** Drops a previous secret whose overlap has ended. */
  private live(s: SigningState | undefined, now: number): SigningState | undefined {
    if (!s) return undefined
    if (s.previous && (s.previousExpiresAt ?? 0) <= now) return { enabled: s.enabled, current: s.current, currentCreatedAt: s.currentCreatedAt }
    return s
  }

  signingSecrets(id: string, now: number): string[] | undefined {
    const s = this.signingOf(id)
    const state = statusOf(s, now)
    if (state === 'off') return undefined
    let out: string[]
    try {
      out = [this.box.open(s!.current!, id)]
    } catch (err) {
      if (!(err instanceof SecretUnreadable)) throw err
      // Never send unsigned what should be signed: the attempt fails (and is retried) until the key is restored or the secret rotated.
      throw new SecretUnreadable('the signing secret cannot be decrypted with this master key: restore master.key (or master_key) from the backup, or rotate the secret with {"immediate": true}')
    }
    // A previous secret no key opens is left out: the current one still signs.
    if (state === 'overlap' && this.readable(s!.previous, id)) out.push(this.box.open(s!.previous!, id))
    return out
  }
}
