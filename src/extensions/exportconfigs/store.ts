import type { Database } from 'lmdb'
import type { Store } from '../../store/store.js'
import type { ConfigurationSource, ExportConfiguration } from '../../domain/webhooks/model.js'
import { SecretBox, rotate, statusOf, newSecret, type SigningState, type SigningStatus } from './secrets.js'

/**
 * Export configurations in LMDB (`export_configurations`), their signing state apart
 * (`export_configuration_signing`) so no read of a configuration ever touches a secret.
 * An in-memory index by team serves the exporter's hot path.
 */
export class ExportConfigStore implements ConfigurationSource {
  private readonly configs: Database<ExportConfiguration, string>
  private readonly signing: Database<SigningState, string>
  private readonly byTeam = new Map<string, ExportConfiguration[]>()
  /** Called after every change this process commits (the other workers then reload()). */
  onChange?: () => void

  constructor(private readonly store: Store, private readonly box: SecretBox) {
    this.configs = store.db('export_configurations')
    this.signing = store.db('export_configuration_signing')
    this.reload()
  }

  /** Rebuilds the index by team from LMDB: another process changed a configuration. */
  reload(): void {
    this.byTeam.clear()
    for (const { value } of this.configs.getRange({})) this.index(value)
  }

  private index(c: ExportConfiguration): void {
    const list = (this.byTeam.get(c.team) ?? []).filter((x) => x.id !== c.id)
    list.push(c)
    this.byTeam.set(c.team, list)
  }

  private unindex(c: ExportConfiguration): void {
    this.byTeam.set(c.team, (this.byTeam.get(c.team) ?? []).filter((x) => x.id !== c.id))
  }

  get(id: string): ExportConfiguration | undefined {
    return this.configs.get(id)
  }

  /** A configuration of `team`, or undefined (another team's id is as unknown as a missing one). */
  getForTeam(id: string, team: string): ExportConfiguration | undefined {
    const c = this.configs.get(id)
    return c && c.team === team ? c : undefined
  }

  forTeam(team: string): readonly ExportConfiguration[] {
    return this.byTeam.get(team) ?? []
  }

  async put(c: ExportConfiguration): Promise<void> {
    await this.store.durable(this.configs.put(c.id, c))
    this.index(c)
    this.onChange?.()
  }

  async remove(c: ExportConfiguration): Promise<void> {
    await this.store.durable(
      this.store.root.transaction(() => {
        this.configs.remove(c.id)
        this.signing.remove(c.id)
      }),
    )
    this.unindex(c)
    this.onChange?.()
  }

  async disable(id: string, reason: string): Promise<void> {
    const c = this.configs.get(id)
    if (!c || !c.enabled) return
    await this.put({ ...c, enabled: false, disabledReason: reason, updatedAt: new Date().toISOString() })
  }

  signingState(id: string): SigningState | undefined {
    return this.signing.get(id)
  }

  /** What an API response may show about signing: never a secret. */
  signingView(id: string, now: number): { enabled: boolean; state: SigningStatus; secretCreatedAt?: string; overlapEndsAt?: string } {
    const s = this.signing.get(id)
    const state = statusOf(s, now)
    return {
      enabled: state !== 'off',
      state,
      ...(s?.currentCreatedAt !== undefined && state !== 'off' ? { secretCreatedAt: new Date(s.currentCreatedAt).toISOString() } : {}),
      ...(state === 'overlap' ? { overlapEndsAt: new Date(s!.previousExpiresAt!).toISOString() } : {}),
    }
  }

  /** Rotates (or first enables) signing; the returned secret is shown to the caller once and kept only sealed. */
  async rotate(id: string, immediate: boolean, now: number): Promise<string> {
    const secret = newSecret()
    const next = rotate(this.live(this.signing.get(id), now), this.box.seal(secret, id), { immediate, now })
    await this.store.durable(this.signing.put(id, next))
    return secret
  }

  /** Turns signing off or back on without a new secret (on needs a secret made by rotate before). */
  async setSigningEnabled(id: string, enabled: boolean): Promise<boolean> {
    const s = this.signing.get(id)
    if (enabled && !s?.current) return false
    if (s) await this.store.durable(this.signing.put(id, { ...s, enabled }))
    return true
  }

  /** Drops a previous secret whose overlap has ended. */
  private live(s: SigningState | undefined, now: number): SigningState | undefined {
    if (!s) return undefined
    if (s.previous && (s.previousExpiresAt ?? 0) <= now) return { enabled: s.enabled, current: s.current, currentCreatedAt: s.currentCreatedAt }
    return s
  }

  signingSecrets(id: string, now: number): string[] | undefined {
    const s = this.signing.get(id)
    const state = statusOf(s, now)
    if (state === 'off') return undefined
    const out = [this.box.open(s!.current!, id)]
    if (state === 'overlap') out.push(this.box.open(s!.previous!, id))
    return out
  }
}
