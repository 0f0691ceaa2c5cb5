import { createHash, hash } from 'node:crypto'
import type { Component, CreateSettings, Host, ReceiverFactory, SignalConsumers } from '../../host/component.js'
import type { Consumer } from '../../core/consumer.js'
import { ApiError, invalid } from '../../core/errors.js'
import { Ingest, type IdempotencyKey, type IngestItem } from '../../domain/ingest/index.js'
import type { Reply, RequestContext } from '../../transport/http/server.js'
import { LABELS, MEDIA_KINDS, MEDIA_PATH, type UsageKind } from '../../model/usage-record.js'
import type { StoredResponse } from '../../ports/dedup.js'
import { meteringDescriptor, type Config } from './descriptor.js'

const HOUR = 3_600_000

// Legacy aliases that SPEC says are dropped silently on completions.
const LEGACY_COMPLETION_FIELDS = ['organizationId', 'productId']

/**
 * REST metering (DESIGN §3): AI completions, images, audio, video and tool events as JSON, one object or an array of
 * them per POST. Decodes the body, hands the records to ingest (dedup, Idempotency-Key, the
 * usage pipelines) and answers 201 once they are durable, with one ack per record.
 */
export class MeteringReceiver implements Component {
  private ingest?: Ingest
  private readonly next: Consumer

  constructor(private readonly settings: CreateSettings, private readonly config: Config, next: SignalConsumers) {
    if (!next.usage) throw new Error('the metering receiver feeds usage pipelines only')
    this.next = next.usage
  }

  async start(host: Host): Promise<void> {
    this.ingest = new Ingest(host.usage, this.next, {
      receiver: this.settings.id,
      dedupWindowMs: this.config.dedup_window_hours * HOUR,
      idempotencyTtlMs: this.config.idempotency_ttl_hours * HOUR,
      metrics: this.settings.metrics,
      now: () => host.now(),
      shared: host.shared?.dedup,
    })
    const completions = (ctx: RequestContext) => this.handle(ctx, 'completion')
    for (const kind of MEDIA_KINDS) {
      const handler = (ctx: RequestContext) => this.handle(ctx, kind)
      host.http.route({ method: 'POST', path: `/meter/v2/ai/${MEDIA_PATH[kind]}`, bucket: 'metering', scope: 'metering:write', handler })
    }
    const tools = (ctx: RequestContext) => this.handle(ctx, 'tool')
    host.http.route({ method: 'POST', path: '/meter/v2/ai/completions', bucket: 'metering', scope: 'metering:write', handler: completions })
    for (const path of ['/meter/v2/tool/events', '/v2/tool/events', '/tool/events'])
      host.http.route({ method: 'POST', path, bucket: 'metering', scope: 'metering:write', handler: tools })
  }

  async shutdown(): Promise<void> {}

  private async handle(ctx: RequestContext, kind: UsageKind): Promise<Reply> {
    // One await for the bytes; their JSON is parsed here (ctx.json() then ctx.raw() would be two).
    const raw = await ctx.jsonBytes()
    const parsed = ctx.parseJson(raw)
    const batch = Array.isArray(parsed)
    const bodies = this.records(parsed)

    const items: IngestItem[] = new Array(bodies.length)
    // A single object is signed as the bytes received; a batch element as its JSON.
    const signatures: string[] = new Array(bodies.length)
    for (let i = 0; i < bodies.length; i++) {
      items[i] = { kind, body: kind === 'tool' ? bodies[i] : dropLegacy(bodies[i]) }
      signatures[i] = signatureOf(batch ? JSON.stringify(bodies[i]) : raw)
    }
    const render = (ids: readonly string[], created: string): StoredResponse => ({
      status: 201,
      body: batch ? `[${ids.map((id, i) => ackJson(id, LABELS[kind], signatures[i], created)).join(',')}]` : ackJson(ids[0], LABELS[kind], signatures[0], created),
    })
    const key = ctx.header('idempotency-key')
    const idem: IdempotencyKey | undefined =
      key === undefined ? undefined : { key, bodyHash: createHash('sha256').update(kind).update('\0').update(raw).digest('hex'), render }

    const out = await this.ingest!.submit(ctx.principal!, items, idem)
    const answer = out.replayed ?? render(out.ids, out.created)
    return { status: answer.status, text: answer.body, contentType: 'application/json', headers: out.replayed ? { 'idempotent-replayed': 'true' } : undefined }
  }

  /** The records of a body: one object, or an array of them (all-or-nothing). */
  private records(parsed: unknown): Record<string, unknown>[] {
    const items = Array.isArray(parsed) ? parsed : [parsed]
    if (Array.isArray(parsed) && parsed.length === 0) throw invalid('empty_batch', 'the array holds no records')
    if (items.length > this.config.max_batch_items)
      // The limit as a field too: a forwarding sidecar lowers its batch size to it (src/exporters/upstream).
      throw new ApiError(413, 'invalid_request_error', 'batch_too_large', `at most ${this.config.max_batch_items} records per request`, {
        extra: { max_batch_items: this.config.max_batch_items },
      })
    for (let i = 0; i < items.length; i++) {
      const item = items[i]
      if (typeof item !== 'object' || item === null || Array.isArray(item))
        throw invalid('invalid_body', 'each record must be a JSON object', Array.isArray(parsed) ? `[${i}]` : undefined)
    }
    return items
  }
}

/**
 * The 201 body of one record, in SPEC's field order, written directly (it is on every request's
 * path): every value is meterd's own, none needs escaping (ids are base32, the signature hex, the
 * label a constant, created an ISO time).
 */
function ackJson(id: string, label: string, signature: string, created: string): string {
  return `{"id":"${id}","resourceType":"metering","label":"${label}","signature":"${signature}","created":"${created}"}`
}

function dropLegacy(raw: Record<string, unknown>): Record<string, unknown> {
  // Constant names (not a loop over the list): the test stays monomorphic for bodies of one shape.
  if (!('organizationId' in raw) && !('productId' in raw)) return raw
  const out = { ...raw }
  for (const f of LEGACY_COMPLETION_FIELDS) delete out[f]
  return out
}

/** A digest of the record as received, so a client can tell what meterd acknowledged. */
function signatureOf(bytes: Buffer | string): string {
  return 'sha256:' + hash('sha256', bytes, 'hex')
}

export const meteringFactory: ReceiverFactory<typeof meteringDescriptor.schema> = {
  ...meteringDescriptor,
  create: (settings, config, next) => new MeteringReceiver(settings, config, next),
}
