import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto'

/** Rotation overlap of SPEC's Limits: the previous secret stays valid for 24 hours. */
export const OVERLAP_MS = 24 * 3_600_000

/** A secret at rest: AES-256-GCM under the master key; `none` only as older versions wrote it when no master key was configured. */
export type SealedSecret =
  | { alg: 'aes-256-gcm'; iv: Buffer; tag: Buffer; ct: Buffer }
  | { alg: 'none'; value: string }

/**
 * The signing state of one export configuration (SPEC States → Webhook signing).
 * `current` signs every delivery; `previous` also signs until `previousExpiresAt`.
 * At most two secrets are ever valid.
 */
export interface SigningState {
  enabled: boolean
  current?: SealedSecret
  currentCreatedAt?: number
  previous?: SealedSecret
  previousExpiresAt?: number
}

export type SigningStatus = 'off' | 'single' | 'overlap'

export function statusOf(s: SigningState | undefined, now: number): SigningStatus {
  if (!s || !s.enabled || !s.current) return 'off'
  return s.previous && (s.previousExpiresAt ?? 0) > now ? 'overlap' : 'single'
}

/** A new secret: `whsec_` + 32 random bytes, base64url. The HMAC key is the whole string. */
export function newSecret(): string {
  return 'whsec_' + randomBytes(32).toString('base64url')
}

/**
 * The transition table. From off: single (or overlap with the secret that signed before
 * signing was turned off). Single + `{}`: overlap 24 h. Immediate: new only. During an
 * overlap a further rotation drops the oldest at once, so ≤ 2 secrets stay valid.
 */
export function rotate(state: SigningState | undefined, sealed: SealedSecret, opts: { immediate: boolean; now: number }): SigningState {
  const { now, immediate } = opts
  const next: SigningState = { enabled: true, current: sealed, currentCreatedAt: now }
  if (!immediate && state?.current) {
    next.previous = state.current
    next.previousExpiresAt = now + OVERLAP_MS
  }
  return next
}

/** A sealed secret that no key this process holds can open (the master key changed). */
export class SecretUnreadable extends Error {}

const derive = (masterKey: string) => createHash('sha256').update('meterd/webhook-secrets/v1\0').update(masterKey).digest()

/**
 * Seals secrets with a key derived from the master key, and opens them with it or with an
 * older one (`previous`: the generated key file once the operator configures a key of their
 * own). `{alg: 'none'}` secrets written by older versions still open; reseal() moves
 * them, and secrets sealed under an older key, to the current key.
 */
export class SecretBox {
  private readonly key: Buffer
  private readonly previous: Buffer[]

  constructor(masterKey: string, previous: readonly string[] = []) {
    this.key = derive(masterKey)
    this.previous = previous.filter((k) => k !== masterKey).map(derive)
  }

  /** `aad` binds the ciphertext to its configuration, so a sealed secret cannot be moved to another. */
  seal(secret: string, aad: string): SealedSecret {
    const iv = randomBytes(12)
    const c = createCipheriv('aes-256-gcm', this.key, iv)
    c.setAAD(Buffer.from(aad))
    const ct = Buffer.concat([c.update(secret, 'utf8'), c.final()])
    return { alg: 'aes-256-gcm', iv, tag: c.getAuthTag(), ct }
  }

  open(s: SealedSecret, aad: string): string {
    if (s.alg === 'none') return s.value
    for (const key of [this.key, ...this.previous]) {
      const value = tryOpen(key, s, aad)
      if (value !== undefined) return value
    }
    throw new SecretUnreadable('a signing secret was sealed with another master key')
  }

  /**
   * The same secret sealed with the current key, or undefined when it already is (or cannot
   * be opened at all: `unreadable`).
   */
  reseal(s: SealedSecret, aad: string): { sealed?: SealedSecret; unreadable?: true } {
    if (s.alg !== 'none' && tryOpen(this.key, s, aad) !== undefined) return {}
    try {
      return { sealed: this.seal(this.open(s, aad), aad) }
    } catch (err) {
      if (err instanceof SecretUnreadable) return { unreadable: true }
      throw err
    }
  }
}

function tryOpen(key: Buffer, s: Extract<SealedSecret, { alg: 'aes-256-gcm' }>, aad: string): string | undefined {
  try {
    const d = createDecipheriv('aes-256-gcm', key, Buffer.from(s.iv))
    d.setAAD(Buffer.from(aad))
    d.setAuthTag(Buffer.from(s.tag))
    return Buffer.concat([d.update(Buffer.from(s.ct)), d.final()]).toString('utf8')
  } catch {
    return undefined // the tag does not verify under this key
  }
}
