import { ApiError, invalid } from '../../core/errors.js'
import { newId } from '../../core/ids.js'
import { parseJson } from '../../transport/http/body.js'
import type { HttpServer, Reply, RequestContext, Route } from '../../transport/http/server.js'
import type { DecodeOptions, DecodedRequest, OtlpSignal } from '../../transport/otlp/batch.js'
import { decodeLogsJson, decodeMetricsJson, decodeTracesJson } from '../../transport/otlp/decode-json.js'
import { decodeLogsProto, decodeMetricsProto, decodeTracesProto } from '../../transport/otlp/decode-proto.js'
import { encodeExportResponse } from '../../transport/otlp/response.js'
import { rpcStatusBody } from '../../transport/grpc/status.js'
import { checkPayloadKeys, exportSignals, type ExportOutcome, type ExportTarget } from './export.js'

/** A fixed signal, or `any`: the unified endpoint, where the body says which (OTLP/JSON only). */
type Target = OtlpSignal | 'any'

const SIGNALS: readonly OtlpSignal[] = ['traces', 'logs', 'metrics']
/** The field of an OTLP/JSON export that holds each signal. */
const FIELD: Record<OtlpSignal, string> = { traces: 'resourceSpans', logs: 'resourceLogs', metrics: 'resourceMetrics' }
const PROTO = { traces: decodeTracesProto, logs: decodeLogsProto, metrics: decodeMetricsProto }
const JSON_DECODERS = { traces: decodeTracesJson, logs: decodeLogsJson, metrics: decodeMetricsJson }
/** The partial-success count field of each signal's Export*ServiceResponse (OTLP/JSON spelling). */
const REJECTED_FIELD: Record<OtlpSignal, string> = { traces: 'rejectedSpans', logs: 'rejectedLogRecords', metrics: 'rejectedDataPoints' }

type Encoding = 'protobuf' | 'json'

/**
 * The least JSON nesting an OTLP/JSON body is allowed. OTLP/JSON spends four JSON levels on each
 * level of a nested AnyValue (`kvlistValue` → `values` → KeyValue → `value`; three for an array)
 * and ten on the envelope above an attribute's value, so server.max_json_depth (32) refused an
 * attribute holding maps nested 6 deep — the whole export, a 400 that exporters drop — where the
 * same export in protobuf decodes maps ~30 deep (protobufjs stops at 100 nested messages, three
 * per level). 160 levels take whatever the protobuf decoder takes; the bound is still checked
 * before parsing.
 */
export const OTLP_JSON_DEPTH = 160

/** The request's media type, lowercased, without parameters ('' when it sends none). */
const mediaType = (ctx: RequestContext): string => (ctx.header('content-type') ?? '').split(';')[0].trim().toLowerCase()

/** The encoding a media type names; undefined for any other type. */
function mediaOf(type: string): Encoding | undefined {
  if (type === 'application/x-protobuf' || type === 'application/protobuf') return 'protobuf'
  if (type === 'application/json') return 'json'
  return undefined
}

function encodingOf(ctx: RequestContext): Encoding {
  const type = mediaType(ctx)
  const encoding = mediaOf(type)
  if (encoding) return encoding
  ctx.req.resume()
  throw new ApiError(415, 'invalid_request_error', 'unsupported_media_type', `OTLP/HTTP takes application/x-protobuf or application/json, not ${type || 'a body without a content type'}`, {
    param: 'Content-Type',
  })
}

export interface OtlpHttpSettings {
  target: ExportTarget
  maxRequestBytes: number
  maxJsonDepth: number
  decode: DecodeOptions
  now(): number
}

/**
 * OTLP/HTTP (DESIGN §3): one handler behind every path real clients post to, on the base URL and
 * on the receiver's own listener. The body is decoded once — before admission when the key can
 * only be in it — and its signals go to the pipelines; the answer is the signal's
 * Export*ServiceResponse for protobuf, and for JSON the shape the vendor's senders parse:
 * `{id, resourceType, processedEvents, created}` (plus `partialSuccess`).
 */
export class OtlpHttp {
  private readonly decoded = new WeakMap<RequestContext, Promise<DecodedRequest[]>>()
  /** Requests whose key was looked for in the body (no header carried one). */
  private readonly keyFromBody = new WeakSet<RequestContext>()

  constructor(private readonly s: OtlpHttpSettings) {}

  /** The routes of one path: `target` is its signal, `legacyMetrics` answers `processedMetrics` (the old metrics sender). */
  route(path: string, target: Target, legacyMetrics = false): Route {
    return {
      method: 'POST',
      path,
      bucket: 'metering',
      scope: 'metering:write',
      maxBodyBytes: this.s.maxRequestBytes,
      payloadKey: (ctx) => this.payloadKey(ctx, target),
      handler: (ctx) => this.handle(ctx, target, legacyMetrics),
      errorReply: protobufError,
    }
  }

  mount(http: HttpServer, paths: readonly [path: string, target: Target, legacyMetrics?: boolean][]): void {
    for (const [path, target, legacy] of paths) http.route(this.route(path, target, legacy))
  }

  private decode(ctx: RequestContext, target: Target): Promise<DecodedRequest[]> {
    let p = this.decoded.get(ctx)
    if (!p) this.decoded.set(ctx, (p = this.decodeBody(ctx, target)))
    return p
  }

  private async decodeBody(ctx: RequestContext, target: Target): Promise<DecodedRequest[]> {
    const encoding = encodingOf(ctx)
    if (encoding === 'protobuf') {
      if (target === 'any')
        throw new ApiError(415, 'invalid_request_error', 'unsupported_media_type', 'the unified OTLP endpoint takes OTLP/JSON; send protobuf to …/v1/traces, …/v1/logs or …/v1/metrics', {
          param: 'Content-Type',
        })
      return [PROTO[target](await ctx.raw(), this.s.decode)]
    }
    const raw = await ctx.raw()
    if (raw.length === 0) throw invalid('empty_body', 'the request body is empty')
    const body = parseJson(raw, this.s.maxJsonDepth)
    if (target !== 'any') return [JSON_DECODERS[target](body, this.s.decode)]
    const present = SIGNALS.filter((s) => typeof body === 'object' && body !== null && (body as Record<string, unknown>)[FIELD[s]] !== undefined)
    if (present.length === 0) throw invalid('invalid_otlp', 'the body holds none of resourceSpans, resourceLogs, resourceMetrics')
    return present.map((s) => JSON_DECODERS[s](body, this.s.decode))
  }

  /** Called by the server only when no header carries a key. */
  private async payloadKey(ctx: RequestContext, target: Target): Promise<string | undefined> {
    this.keyFromBody.add(ctx)
    const keys = new Set((await this.decode(ctx, target)).flatMap((d) => d.apiKeys))
    return keys.values().next().value
  }

  private async handle(ctx: RequestContext, target: Target, legacyMetrics: boolean): Promise<Reply> {
    // Decoded already when the key was looked for in the body; else decoded here, unremembered
    // (most exports carry their key in a header: no weak-map entry per request for the GC).
    const parts = await (this.decoded.get(ctx) ?? this.decodeBody(ctx, target))
    if (this.keyFromBody.has(ctx)) checkPayloadKeys([...new Set(parts.flatMap((d) => d.apiKeys))])
    const outcome = await exportSignals(ctx.principal!, parts, this.s.target)
    if (encodingOf(ctx) === 'protobuf') {
      const signal = parts[0].signal
      const r = outcome.rejected[signal]
      const body = encodeExportResponse(signal, r ? { rejected: r.count, errorMessage: r.message } : undefined)
      // Full success is the empty message: as '' the answer's head and (empty) body leave in one
      // write, where an empty Buffer makes Node write the head and the body apart (writev).
      return { status: 200, text: body.length === 0 ? '' : Buffer.from(body.buffer, body.byteOffset, body.length), contentType: 'application/x-protobuf' }
    }
    return { status: 200, body: jsonAnswer(parts, outcome, legacyMetrics, this.s.now()) }
  }
}

/**
 * The OTLP specification makes the body of every 4xx and 5xx a google.rpc.Status, in the
 * request's encoding ("the server MUST use the same Content-Type in the response as it received
 * in the request"), and the Collector's otlphttp exporter decodes it as protobuf to report the
 * server's message: a protobuf request is answered a protobuf Status. JSON requests keep DESIGN
 * §3's JSON error shape (undefined here), as does a request of neither type (415).
 */
function protobufError(err: ApiError, ctx: RequestContext): Reply | undefined {
  if (mediaOf(mediaType(ctx)) !== 'protobuf') return undefined
  return { status: err.status, text: rpcStatusBody(err), contentType: 'application/x-protobuf', headers: err.headers }
}

/** `{id, resourceType, processedEvents, created}`, the shape the vendor's own OTLP senders parse and print. */
function jsonAnswer(parts: DecodedRequest[], outcome: ExportOutcome, legacyMetrics: boolean, now: number): Record<string, unknown> {
  const out: Record<string, unknown> = {
    id: newId(now),
    resourceType: parts.map((d) => d.signal).join(','),
    [legacyMetrics ? 'processedMetrics' : 'processedEvents']: outcome.processed,
    created: new Date(now).toISOString(),
  }
  const rejected = Object.entries(outcome.rejected)
  if (rejected.length) {
    const partial: Record<string, unknown> = {}
    for (const [signal, r] of rejected) partial[REJECTED_FIELD[signal as OtlpSignal]] = r!.count
    partial.errorMessage = rejected.map(([, r]) => r!.message).join('; ')
    out.partialSuccess = partial
  }
  return out
}
