import { createHash, hash } from 'node:crypto'
import { Type, type Static } from '@sinclair/typebox'
import type { Component, CreateSettings, Host, ReceiverFactory, SignalConsumers } from '../../core/component.js'
import type { Batch, Consumer } from '../../core/consumer.js'
import { ApiError, conflict, invalid, toApiError } from '../../core/errors.js'
import { newId } from '../../core/ids.js'
import type { Reply, RequestContext } from '../../transport/http/server.js'
import { EMPTY_ATTRIBUTION, LABELS, type Caller, type UsageKind, type UsageRecord } from '../../model/usage-record.js'

const HOUR = 3_600_000

const schema = Type.Object(
  {
    dedup_window_hours: Type.Number({ default: 24, minimum: 0, maximum: 840, description: 'How long a transactionId is remembered per account (up to 35 days)' }),
    idempotency_ttl_hours: Type.Number({ default: 24, minimum: 1, maximum: 168, description: 'How long an Idempotency-Key response is replayed' }),
    max_batch_items: Type.Integer({ default: 1000, minimum: 1, description: 'Most records one POST may carry as a JSON array' }),
  },
  { additionalProperties: false },
)
type Config = Static<typeof schema>

// Legacy aliases that SPEC says are dropped silently on completions.
const LEGACY_COMPLETION_FIELDS = ['organizationId', 'productId']
const IDEMPOTENCY_KEY = /^[!-~]{1,255}$/

interface Ack {
  id: string
  resourceType: 'metering'
  label: string
  signature: string
  created: string
}

/**
 * REST metering (DESIGN §3): AI completions and tool events as JSON, one object or an
 * array of them per POST. Decodes, deduplicates (Idempotency-Key, then transactionId),
 * and hands the batch to the usage pipelines; answers 201 only once every exporter has
 * acknowledged (the lmdb exporter: committed and flushed).
 */
export class MeteringReceiver implements Component {
  private host?: Host
  private readonly next: Consumer
  /** Requests holding an Idempotency-Key, per account, while they are in flight. */
  private readonly pendingKeys = new Map<string, string>()
  /** In-flight records per (account, kind, transactionId): a concurrent retry waits for the first. */
  private readonly pendingTx = new Map<string, Promise<string>>()

  constructor(private readonly settings: CreateSettings, private readonly config: Config, next: SignalConsumers) {
    if (!next.usage) throw new Error('the metering receiver feeds usage pipelines only')
    this.next = next.usage
  }

  async start(host: Host): Promise<void> {
    this.host = host
    const completions = (ctx: RequestContext) => this.handle(ctx, 'completion')
    const tools = (ctx: RequestContext) => this.handle(ctx, 'tool')
    host.http.route({ method: 'POST', path: '/meter/v2/ai/completions', bucket: 'metering', scope: 'metering:write', handler: completions })
    for (const path of ['/meter/v2/tool/events', '/v2/tool/events', '/tool/events'])
      host.http.route({ method: 'POST', path, bucket: 'metering', scope: 'metering:write', handler: tools })
  }

  async shutdown(): Promise<void> {}

  private async handle(ctx: RequestContext, kind: UsageKind): Promise<Reply> {
    const host = this.host!
    const caller = ctx.principal!
    const parsed = await ctx.json()
    const raw = await ctx.raw()
    const items = Array.isArray(parsed) ? parsed : [parsed]
    if (Array.isArray(parsed) && parsed.length === 0) throw invalid('empty_batch', 'the array holds no records')
    if (items.length > this.config.max_batch_items)
      throw invalid('batch_too_large', `at most ${this.config.max_batch_items} records per request`, undefined, 413)
    items.forEach((item, i) => {
      if (typeof item !== 'object' || item === null || Array.isArray(item))
        throw invalid('invalid_body', 'each record must be a JSON object', Array.isArray(parsed) ? `[${i}]` : undefined)
    })

    const now = host.now()
    let replayKey: string | undefined
    let bodyHash = ''
    const idemHeader = ctx.req.headers['idempotency-key']
    if (idemHeader !== undefined) {
      const key = Array.isArray(idemHeader) ? idemHeader[0] : idemHeader
      if (!IDEMPOTENCY_KEY.test(key))
        throw invalid('invalid_idempotency_key', 'Idempotency-Key must be 1 to 255 printable ASCII characters without spaces', 'Idempotency-Key')
      bodyHash = createHash('sha256').update(kind).update('\0').update(raw).digest('hex')
      const stored = host.store.usage.findReplay(caller.account, key, this.config.idempotency_ttl_hours * HOUR, now)
      if (stored) {
        if (stored.bodyHash !== bodyHash) throw mismatch()
        return { status: stored.response.status, text: stored.response.body, contentType: 'application/json', headers: { 'idempotent-replayed': 'true' } }
      }
      replayKey = `${caller.account}\0${key}`
      const inFlight = this.pendingKeys.get(replayKey)
      if (inFlight !== undefined) {
        if (inFlight !== bodyHash) throw mismatch()
        throw conflict('idempotency_key_in_progress', 'a request with this Idempotency-Key is still being processed', { 'retry-after': '1' })
      }
      this.pendingKeys.set(replayKey, bodyHash)
    }

    const settle: (() => void)[] = []
    // Records this request stores first; concurrent retries of the same transactionId wait on them.
    const owned: { ack: Ack; resolve: (id: string) => void; reject: (e: unknown) => void }[] = []
    try {
      const created = isoAt(now)
      const acks: Ack[] = []
      const records: UsageRecord[] = []
      const waits: Promise<void>[] = []
      // Repeats of a record earlier in the same batch: they take its id once it is final (after the
      // commit). Rare, so the list is only made when there is one.
      let twins: [Ack, Ack][] | undefined
      const seenInBatch = new Map<string, Ack>()
      const windowMs = this.config.dedup_window_hours * HOUR

      for (const item of items as Record<string, unknown>[]) {
        const body = kind === 'completion' ? dropLegacy(item) : item
        // A single object is signed as the bytes received; a batch element as its JSON.
        const signature = Array.isArray(parsed) ? signatureOf(JSON.stringify(item)) : signatureOf(raw)
        const ack: Ack = { id: '', resourceType: 'metering', label: LABELS[kind], signature, created }
        acks.push(ack)
        const tx = body.transactionId
        if (typeof tx === 'string' && tx !== '' && windowMs > 0) {
          const k = `${caller.account}\0${kind}\0${tx}`
          const twin = seenInBatch.get(k)
          if (twin) {
            ;(twins ??= []).push([ack, twin])
            continue
          }
          seenInBatch.set(k, ack)
          const prior = host.store.usage.findDuplicate(caller.account, kind, tx, windowMs, now)
          if (prior) {
            ack.id = prior
            continue
          }
          const pending = this.pendingTx.get(k)
          if (pending) {
            waits.push(pending.then((id) => void (ack.id = id)))
            continue
          }
          const id = newId(now)
          let resolve!: (id: string) => void
          let reject!: (e: unknown) => void
          const p = new Promise<string>((res, rej) => ((resolve = res), (reject = rej)))
          p.catch(() => undefined)
          this.pendingTx.set(k, p)
          settle.push(() => this.pendingTx.delete(k))
          ack.id = id
          records.push(newRecord(id, kind, body, caller, created))
          owned.push({ ack, resolve, reject })
          continue
        }
        ack.id = newId(now)
        records.push(newRecord(ack.id, kind, body, caller, created))
      }

      // Ids the store kept in place of ours (see BatchContext.duplicates) replace them in the answer.
      const response = (duplicates?: ReadonlyMap<string, string>): string =>
        Array.isArray(parsed)
          ? `[${acks.map((a) => ackJson(a, duplicates?.get(a.id))).join(',')}]`
          : ackJson(acks[0], duplicates?.get(acks[0].id))
      if (records.length) {
        const batch: Batch = { items: records, ctx: { caller, receiver: this.settings.id, dedupWindowMs: windowMs } }
        if (replayKey !== undefined && waits.length === 0 && twins === undefined) {
          batch.ctx.idempotency = { key: replayKey.slice(caller.account.length + 1), bodyHash, response: (kept) => ({ status: 201, body: response(kept) }) }
        }
        try {
          await this.next.consume(batch)
          // Steps a processor added run even when no exporter of the pipeline writes (pricing → debug).
          await batch.ctx.unit?.commit()
          this.settings.metrics.accepted(records.length)
        } catch (err) {
          const apiErr = toApiError(err)
          if (apiErr.status < 500) this.settings.metrics.refused(records.length)
          else this.settings.metrics.failed(records.length)
          for (const o of owned) o.reject(err)
          throw apiErr
        }
        const duplicates = batch.ctx.duplicates
        for (const o of owned) {
          const kept = duplicates?.get(o.ack.id)
          if (kept !== undefined) o.ack.id = kept
          o.resolve(o.ack.id)
        }
      }
      await Promise.all(waits)
      if (twins) for (const [ack, twin] of twins) ack.id = twin.id
      return { status: 201, text: response(), contentType: 'application/json' }
    } finally {
      for (const s of settle) s()
      if (replayKey !== undefined) this.pendingKeys.delete(replayKey)
    }
  }
}

const mismatch = (): ApiError =>
  new ApiError(409, 'conflict_error', 'idempotency_key_mismatch', 'this Idempotency-Key was used with a different request body', {
    headers: { 'x-should-retry': 'false' },
  })

/**
 * The 201 body of one record, in SPEC's field order, written directly (it is on every request's
 * path): every value is meterd's own, none needs escaping (ids are base32, the signature hex, the
 * label a constant, created an ISO time).
 */
function ackJson(a: Ack, id = a.id): string {
  return `{"id":"${id}","resourceType":"${a.resourceType}","label":"${a.label}","signature":"${a.signature}","created":"${a.created}"}`
}

// toISOString costs about a microsecond; requests of the same millisecond share one.
let isoMs = NaN
let isoText = ''
function isoAt(ms: number): string {
  if (ms !== isoMs) {
    isoMs = ms
    isoText = new Date(ms).toISOString()
  }
  return isoText
}

function dropLegacy(raw: Record<string, unknown>): Record<string, unknown> {
  if (!LEGACY_COMPLETION_FIELDS.some((f) => f in raw)) return raw
  const out = { ...raw }
  for (const f of LEGACY_COMPLETION_FIELDS) delete out[f]
  return out
}

/** A digest of the record as received, so a client can tell what meterd acknowledged. */
function signatureOf(bytes: Buffer | string): string {
  return 'sha256:' + hash('sha256', bytes, 'hex')
}

function newRecord(id: string, kind: UsageKind, body: Record<string, unknown>, caller: Caller, receivedAt: string): UsageRecord {
  return {
    id,
    kind,
    body: body as any,
    eventTime: receivedAt, // the validate processor sets the event's own time
    receivedAt,
    caller: { account: caller.account, tenant: caller.tenant, team: caller.team, environment: caller.environment, keyId: caller.keyId },
    attribution: { ...EMPTY_ATTRIBUTION },
    attributed: false,
  } as UsageRecord
}

export const meteringFactory: ReceiverFactory<typeof schema> = {
  kind: 'receiver',
  type: 'metering',
  description: 'REST metering: POST /meter/v2/ai/completions and /meter/v2/tool/events on the base URL',
  signals: ['usage'],
  schema,
  create: (settings, config, next) => new MeteringReceiver(settings, config, next),
}
