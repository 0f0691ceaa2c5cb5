import type { Batch, Consumer } from '../../core/consumer.js'
import { PermanentError, toApiError } from '../../core/errors.js'
import { newId } from '../../core/ids.js'
import { isoAt } from '../../core/iso-time.js'
import type { ComponentMetrics } from '../../core/telemetry.js'
import { idTooLong, MAX_ID_LENGTH } from '../../model/identifiers.js'
import { emptyAttribution, type Caller, type UsageKind, type UsageRecord } from '../../model/usage-record.js'
import { ReplayTaken, type DedupStore, type SharedDedup, type StoredResponse, type TransactionClaim } from '../../ports/dedup.js'
import { withoutOwnIdentity } from './identity.js'
import { IdempotencyKeys, idempotencyInProgress, idempotencyMismatch, type IdempotencyKey } from './idempotency.js'
import { inFlightFor, Pending, type InFlight } from './in-flight.js'

/** One record a receiver decoded: its kind and the client's body (its `transactionId`, if any, dedups it). */
export interface IngestItem {
  kind: UsageKind
  body: Record<string, unknown>
}

/** What a request's records came to. */
export type Ingested =
  /** Stored (or found stored): one id per item, in order, and the records' receive time. */
  | { replayed?: undefined; ids: string[]; created: string }
  /** An Idempotency-Key's stored answer, replayed. */
  | { replayed: StoredResponse; ids?: undefined; created?: undefined }

export interface IngestSettings {
  /** The receiver's component id (BatchContext.receiver). */
  receiver: string
  /** How long a transactionId is remembered per team and kind; 0 turns transactionId dedup off. */
  dedupWindowMs: number
  /** How long an Idempotency-Key's answer is replayed. */
  idempotencyTtlMs: number
  /** The receiver's accepted / refused / failed counters. */
  metrics: ComponentMetrics
  now(): number
  /**
   * Gateway cluster (server.shared_state): transactionIds and Idempotency-Keys are also claimed in
   * the shared store before the records are stored, so a twin sent to another replica at the same
   * time is stored once.
   */
  shared?: SharedDedup
}

/** A record this request stores first; concurrent requests with its transactionId wait on it. */
interface Owned {
  index: number
  kind: UsageKind
  tx: string
  record: UsageRecord
  /** Its entry in the in-flight table: settled once the record is stored (or is not). */
  pending: Pending
}

/**
 * Ingest, shared by every receiver (DESIGN §3 Idempotency): the identity and identifiers of
 * each item are checked before anything reaches the store; an Idempotency-Key replays its
 * answer; each record with a transactionId is deduplicated per team and kind — against the
 * store within the window, against requests in flight in this process (it waits for their
 * outcome) and against earlier items of the same request; the rest go to the pipeline as one
 * batch, answered once durable. The store checks again inside the commit (another process may
 * have stored the transactionId since) and the answer carries the id it kept
 * (BatchContext.duplicates), so an id answered is always an id stored.
 */
export class Ingest {
  private readonly inFlight: InFlight
  private readonly keys: IdempotencyKeys

  constructor(private readonly store: DedupStore, private readonly next: Consumer<UsageRecord>, private readonly settings: IngestSettings) {
    this.inFlight = inFlightFor(store)
    this.keys = new IdempotencyKeys(store, this.inFlight, settings.idempotencyTtlMs)
  }

  /**
   * Stores a request's records for `caller` (the key's identity) and resolves with the ids to
   * answer, or the replay of an Idempotency-Key. `items` belongs to ingest after the call (their
   * bodies lose identity fields that name the caller). Rejects with an ApiError (400 identifier,
   * 403 identity, 409 Idempotency-Key) or the pipeline's ConsumerError; nothing was stored then.
   */
  submit(caller: Caller, items: IngestItem[], idem?: IdempotencyKey): Promise<Ingested> {
    // Not an async function: the usual request (no Idempotency-Key) gets store_'s promise as it
    // is, one promise and one microtask turn fewer than awaiting it here.
    try {
      checkItems(caller, items)
    } catch (err) {
      this.settings.metrics.refused(items.length)
      return Promise.reject(err)
    }
    const now = this.settings.now()
    if (idem === undefined) return this.store_(caller, items, now, undefined)
    return this.keyed(caller, items, now, idem)
  }

  /** submit() with an Idempotency-Key: replayed when answered before, held while in flight. */
  private async keyed(caller: Caller, items: IngestItem[], now: number, idem: IdempotencyKey): Promise<Ingested> {
    const replayed = this.keys.begin(caller.team, idem, now)
    if (replayed) return { replayed }
    try {
      const shared = this.settings.shared
      if (!shared) return await this.store_(caller, items, now, idem)
      return await this.sharedKey(shared, caller, items, now, idem)
    } catch (err) {
      if (!(err instanceof ReplayTaken)) throw err
      // Another worker stored an answer for this key while this request was on its way: that
      // answer stands (or the 409, when its body was another).
      this.keys.end(caller.team, idem)
      return { replayed: this.keys.begin(caller.team, idem, now)! }
    } finally {
      this.keys.end(caller.team, idem)
    }
  }

  /** An Idempotency-Key claimed across replicas too: the answer is stored there once the records are. */
  private async sharedKey(shared: SharedDedup, caller: Caller, items: IngestItem[], now: number, idem: IdempotencyKey): Promise<Ingested> {
    const owner = newId(now)
    const claim = await shared.claimKey(caller.team, idem.key, idem.bodyHash, owner)
    if (!claim.claimed) {
      if (claim.bodyHash !== idem.bodyHash) throw idempotencyMismatch()
      if (claim.response) return { replayed: claim.response }
      throw idempotencyInProgress()
    }
    let out: Ingested
    try {
      out = await this.store_(caller, items, now, idem)
    } catch (err) {
      shared.releaseKey(caller.team, idem.key, owner).catch(() => undefined)
      throw err
    }
    // Stored: a failure to write the answer leaves the claim to expire (claim_ttl_seconds).
    await shared.commitKey(caller.team, idem.key, idem.bodyHash, owner, idem.render(out.ids!, out.created!), this.settings.idempotencyTtlMs).catch(() => undefined)
    return out
  }

  private async store_(caller: Caller, items: IngestItem[], now: number, idem: IdempotencyKey | undefined): Promise<Ingested> {
    const created = createdAt(now)
    const windowMs = this.settings.dedupWindowMs
    const ids: string[] = new Array(items.length)
    const records: UsageRecord[] = []
    const owned: Owned[] = []
    const held: string[] = []
    const waits: Promise<void>[] = []
    // Items repeating an earlier item's transactionId take its id once that is final (after the
    // commit). Rare, so these are made only when there is one.
    let seen: Map<string, number> | undefined
    let twins: [index: number, of: number][] | undefined
    try {
      for (let i = 0; i < items.length; i++) {
        const { kind, body } = items[i]
        const tx = body.transactionId
        if (typeof tx !== 'string' || tx === '' || windowMs <= 0) {
          records.push(newRecord((ids[i] = newId(now)), kind, body, caller, created))
          continue
        }
        const k = `${caller.team}\0${kind}\0${tx}`
        if (items.length > 1) {
          const first = (seen ??= new Map()).get(k)
          if (first !== undefined) {
            ;(twins ??= []).push([i, first])
            continue
          }
          seen.set(k, i)
        }
        const prior = this.store.findDuplicate(caller.team, kind, tx, windowMs, now)
        if (prior !== undefined) {
          ids[i] = prior
          continue
        }
        const inFlight = this.inFlight.records.get(k)
        if (inFlight) {
          waits.push(inFlight.wait().then((id) => void (ids[i] = id)))
          continue
        }
        const pending = new Pending()
        this.inFlight.records.set(k, pending)
        held.push(k)
        const record = newRecord((ids[i] = newId(now)), kind, body, caller, created)
        records.push(record)
        owned.push({ index: i, kind, tx, record, pending })
      }
      const shared = this.settings.shared
      if (shared && owned.length > 0) {
        try {
          await this.claim(shared, caller.team, owned, ids, records, windowMs)
        } catch (err) {
          this.settings.metrics.failed(items.length)
          throw err
        }
      }

      if (records.length > 0) {
        const batch: Batch = { items: records, ctx: { caller, receiver: this.settings.receiver, dedupWindowMs: windowMs } }
        // The replay answer is stored with the records, rendered with the ids the store kept. A
        // request that waited on others, or repeats itself, is not: its answer is only known later.
        if (idem !== undefined && waits.length === 0 && twins === undefined) {
          batch.ctx.idempotency = {
            key: idem.key,
            bodyHash: idem.bodyHash,
            response: (kept) => idem.render(kept.size === 0 ? ids : ids.map((id) => kept.get(id) ?? id), created),
          }
          this.store.guardReplay(batch.ctx, caller.team, idem.key, this.keys.ttlMs, now)
        }
        try {
          await this.next.consume(batch)
          // Steps a processor added run even when no exporter of the pipeline writes (pricing → debug);
          // when the lmdb exporter already awaited the commit, there is nothing left to wait for.
          const unit = batch.ctx.unit
          if (unit !== undefined && !unit.committed) await unit.commit()
          this.settings.metrics.accepted(records.length)
        } catch (err) {
          // The guard's refusal reaches the pipeline as its own failure; the unit says what it was.
          const taken = batch.ctx.idempotency && (await batch.ctx.unit?.commit().then(() => false, (e) => e instanceof ReplayTaken))
          if (taken) {
            for (const o of owned) o.pending.reject(err)
            throw new ReplayTaken()
          }
          if (toApiError(err).status < 500) this.settings.metrics.refused(records.length)
          else this.settings.metrics.failed(records.length)
          for (const o of owned) o.pending.reject(err)
          // The claims go, so that a retry on any replica stores the records.
          if (shared) for (const o of owned) shared.releaseTransaction(caller.team, o.kind, o.tx, o.record.id).catch(() => undefined)
          throw err
        }
        // Ids the store kept in place of ours (another process stored the transactionId first).
        const kept = batch.ctx.duplicates
        for (const o of owned) {
          const id = kept?.get(ids[o.index])
          if (id !== undefined) ids[o.index] = id
          o.pending.resolve(ids[o.index])
        }
        // Durable: each claim becomes the dedup entry for the window. A failure here leaves the
        // claim (it names the record) until claim_ttl_seconds; the answer stands, the record is stored.
        if (shared) await Promise.all(owned.map((o) => shared.commitTransaction(caller.team, o.kind, o.tx, o.record.id, windowMs).catch(() => undefined)))
      }
      if (waits.length > 0) await Promise.all(waits)
      if (twins) for (const [i, first] of twins) ids[i] = ids[first]
      return { ids, created }
    } finally {
      for (const k of held) this.inFlight.records.delete(k)
    }
  }

  /**
   * Claims the owned transactionIds across replicas. One another replica stored takes its id and
   * leaves the batch; when the shared store cannot be reached the claims taken are released and
   * the request fails with the 503 (nothing stored).
   */
  private async claim(shared: SharedDedup, team: string, owned: Owned[], ids: string[], records: UsageRecord[], windowMs: number): Promise<void> {
    const outcomes = await Promise.allSettled(owned.map((o) => shared.claimTransaction(team, o.kind, o.tx, o.record.id, windowMs)))
    const claims: (TransactionClaim | undefined)[] = outcomes.map((r) => (r.status === 'fulfilled' ? r.value : undefined))
    const failed = outcomes.find((r): r is PromiseRejectedResult => r.status === 'rejected')
    if (failed) {
      owned.forEach((o, i) => {
        if (claims[i]?.claimed) shared.releaseTransaction(team, o.kind, o.tx, o.record.id).catch(() => undefined)
        o.pending.reject(failed.reason)
      })
      owned.length = 0
      throw failed.reason
    }
    const elsewhere = new Set<UsageRecord>()
    for (let i = owned.length - 1; i >= 0; i--) {
      const c = claims[i]!
      if (c.claimed) continue
      const o = owned[i]
      ids[o.index] = c.id
      o.pending.resolve(c.id)
      elsewhere.add(o.record)
      owned.splice(i, 1)
    }
    if (elsewhere.size > 0) {
      const kept = records.filter((r) => !elsewhere.has(r))
      records.length = 0
      records.push(...kept)
    }
  }
}

/** What must hold before a store sees an item: its identity is the caller's, its transactionId fits a key. */
function checkItems(caller: Caller, items: IngestItem[]): void {
  const many = items.length > 1
  for (let i = 0; i < items.length; i++) {
    const item = items[i]
    item.body = withoutOwnIdentity(item.body, caller, many ? `[${i}].` : '')
    const tx = item.body.transactionId
    if (typeof tx === 'string' && idTooLong(tx))
      throw new PermanentError(`transactionId must be a string of 1 to ${MAX_ID_LENGTH} characters`, 'invalid_field', 'transactionId', many ? i : undefined)
  }
}

// Requests of the same millisecond share one spelling (isoAt is cheap, not free).
let isoMs = NaN
let isoText = ''
function createdAt(ms: number): string {
  if (ms !== isoMs) {
    isoMs = ms
    isoText = isoAt(ms)
  }
  return isoText
}

function newRecord(id: string, kind: UsageKind, body: Record<string, unknown>, caller: Caller, receivedAt: string): UsageRecord {
  return {
    id,
    kind,
    body: body as any,
    eventTime: receivedAt, // the validate processor sets the event's own time
    receivedAt,
    caller: { account: caller.account, tenant: caller.tenant, team: caller.team, environment: caller.environment, keyId: caller.keyId },
    attribution: emptyAttribution(),
    attributed: false,
  } as UsageRecord
}
