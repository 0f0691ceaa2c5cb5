import protobuf from 'protobufjs'
import { invalid } from '../../core/errors.js'
import type { AttributeValue, Attributes, LogItem, OtlpResource, OtlpScope, SpanItem } from '../../model/otlp.js'
import { describeRejection, logPath, spanPath, type DecodeOptions, type DecodedLogs, type DecodedMetrics, type DecodedTraces } from './batch.js'
import { ExportLogsServiceRequest, ExportMetricsServiceRequest, ExportTraceServiceRequest, InstrumentationScope, Resource, Span } from './proto.js'
import { readSpan } from './read-span.js'
import { REFUSED_STRIDE, SPAN_STRIDE, scanTraces, type ScannedTraces } from './scan-traces.js'
import { ItemError, fixed64Decimal, idFault, idFromBytes, int64Value, setAttribute, takeApiKeys, type Int64 } from './values.js'

/*
 * OTLP/protobuf → items. protobufjs decodes the whole request (a truncated or malformed message
 * fails it: 400 / INVALID_ARGUMENT); then each span or log record becomes an item, and an item
 * with a bad id is rejected alone. The decoded messages are read in place: unset fields come
 * from the prototypes protobufjs gives each type (empty strings, zero Longs, empty arrays).
 */

type Message = any

function decodeRequest(type: protobuf.Type, buf: Uint8Array, what: string): Message {
  try {
    return type.decode(buf)
  } catch (err) {
    // protobufjs throws RangeError ("index out of range") on truncation and Error on bad wire types.
    throw invalid('malformed_protobuf', `the body is not a valid ${what}: ${(err as Error).message}`)
  }
}

/**
 * An ExportTraceServiceRequest → one item per accepted span. With `opts.spans` (the consumer reads
 * only some spans), the request is scanned first (scan-traces.ts) and only the spans read, and
 * their resources, are decoded; the others are checked (their ids) and counted. A request the
 * scan cannot vouch for is decoded whole, and filtered the same way: the result is the same.
 */
export function decodeTracesProto(buf: Uint8Array, opts: DecodeOptions = {}): DecodedTraces {
  if (opts.spans) {
    const prefixes = prefixBytes(opts.spans.attributePrefixes)
    const scanned = scanTraces(buf, prefixes)
    if (scanned)
      try {
        return fromScan(buf, scanned, opts)
      } catch {
        // Not expected (the scan follows protobufjs's rules); the whole decode below gives the answer.
      }
  }
  const req = decodeRequest(ExportTraceServiceRequest, buf, 'ExportTraceServiceRequest')
  const out: DecodedTraces = { signal: 'traces', items: [], accepted: 0, rejected: [], rejectedCount: 0, apiKeys: [], places: [] }
  const keys = opts.spans?.attributePrefixes
  if (keys) out.positions = []
  const resources = req.resourceSpans as Message[]
  for (let r = 0; r < resources.length; r++) {
    const rs = resources[r]
    const resourceRead = keys !== undefined && rs.resource ? anyKeyStarts(rs.resource.attributes, keys) : false
    const resource = resourceOf(rs.resource, opts, out.apiKeys)
    const scopes = rs.scopeSpans as Message[]
    for (let s = 0; s < scopes.length; s++) {
      const scope = scopeOf(scopes[s].scope)
      const spans = scopes[s].spans as Message[]
      for (let i = 0; i < spans.length; i++) {
        const sp = spans[i]
        const fault = spanIdsFault(sp.traceId, sp.spanId, sp.parentSpanId)
        if (fault !== undefined) {
          if (describeRejection(out)) out.rejected.push({ path: spanPath(r, s, i), message: fault })
          continue
        }
        try {
          const item = spanItem(resource, scope, sp)
          if (keys === undefined) out.items.push(item)
          else if (resourceRead || anyKeyStarts(sp.attributes, keys)) {
            out.items.push(item)
            out.positions!.push(out.accepted)
          }
          out.places!.push(r, s, i)
          out.accepted++
        } catch (err) {
          reject(out, err, spanPath, r, s, i)
        }
      }
    }
  }
  return out
}

function spanItem(resource: OtlpResource, scope: OtlpScope, sp: Message): SpanItem {
  return spanItemWith(
    resource,
    scope,
    sp,
    idFromBytes(sp.traceId, 16, 'traceId', true),
    idFromBytes(sp.spanId, 8, 'spanId', true),
    idFromBytes(sp.parentSpanId, 8, 'parentSpanId', false),
  )
}

function spanItemWith(resource: OtlpResource, scope: OtlpScope, sp: Message, traceId: string, spanId: string, parentSpanId: string): SpanItem {
  const status = sp.status
  return {
    resource,
    scope,
    span: {
      traceId,
      spanId,
      parentSpanId,
      name: sp.name,
      kind: sp.kind,
      startTimeUnixNano: fixed64Decimal(sp.startTimeUnixNano as Int64),
      endTimeUnixNano: fixed64Decimal(sp.endTimeUnixNano as Int64),
      attributes: attributesOf(sp.attributes),
      status: status ? { code: status.code, message: status.message } : { code: 0, message: '' },
    },
  }
}

/** A span's ids as protobufjs decodes them: why the span is refused (the first bad id), or undefined. */
function spanIdsFault(traceId: Uint8Array, spanId: Uint8Array, parentSpanId: Uint8Array): string | undefined {
  return (
    idFault(traceId, 0, traceId.length, 16, 'traceId', true) ??
    idFault(spanId, 0, spanId.length, 8, 'spanId', true) ??
    idFault(parentSpanId, 0, parentSpanId.length, 8, 'parentSpanId', false)
  )
}

/** A checked id at `buf[start, end)` as lowercase hex, '' when absent. */
function hexAt(buf: Buffer, start: number, end: number): string {
  return start === end ? '' : buf.toString('hex', start, end)
}

/** Whether a decoded KeyValue list has a key starting with one of the prefixes. */
function anyKeyStarts(list: Message[], prefixes: readonly string[]): boolean {
  for (let i = 0; i < list.length; i++) {
    const key = list[i].key as string
    for (const p of prefixes) if (key.startsWith(p)) return true
  }
  return false
}

const prefixCache = new WeakMap<readonly string[], Uint8Array[]>()

function prefixBytes(prefixes: readonly string[]): Uint8Array[] {
  let bytes = prefixCache.get(prefixes)
  if (!bytes) prefixCache.set(prefixes, (bytes = prefixes.map((p) => Buffer.from(p, 'utf8'))))
  return bytes
}

/** The items of a scanned request: protobufjs decodes the resources and the spans read; the others are checked. */
function fromScan(buf: Uint8Array, scanned: ScannedTraces, opts: DecodeOptions): DecodedTraces {
  const out: DecodedTraces = { signal: 'traces', items: [], accepted: 0, positions: [], rejected: [], rejectedCount: 0, apiKeys: [], places: [] }
  const t = scanned.spans
  // One reader over the request; each part is decoded in place, as protobufjs decodes a nested message.
  const reader = protobuf.Reader.create(buf)
  const hex = Buffer.isBuffer(buf) ? buf : Buffer.from(buf.buffer, buf.byteOffset, buf.length)
  const part = (type: protobuf.Type, start: number, end: number): Message => {
    reader.pos = start
    return type.decode(reader, end - start)
  }
  for (let r = 0; r < scanned.resources.length; r++) {
    const rs = scanned.resources[r]
    const resource = resourceOf(rs.resource ? part(Resource, rs.resource[0], rs.resource[1]) : undefined, opts, out.apiKeys)
    for (let s = 0; s < rs.scopes.length; s++) {
      const ss = rs.scopes[s]
      let scope: OtlpScope | undefined
      // The scope's spans with good ids; those with bad ids the scan counted and left out (below).
      for (let k = 0; k < ss.count; k++) {
        const at = (ss.first + k) * SPAN_STRIDE
        if (rs.read || t[at + 2] === 1) {
          scope ??= scopeOf(ss.scope ? part(InstrumentationScope, ss.scope[0], ss.scope[1]) : undefined)
          // The ids as hex straight from the request's bytes where the scan found them (the
          // last of a repeated field, as protobufjs keeps): no Buffer made per id.
          const traceId = hexAt(hex, t[at + 4], t[at + 5])
          const spanId = hexAt(hex, t[at + 6], t[at + 7])
          const parentSpanId = hexAt(hex, t[at + 8], t[at + 9])
          // Read from the bytes when the span has the common shape; else protobufjs decodes it.
          const span = readSpan(hex, t[at], t[at + 1], traceId, spanId, parentSpanId)
          out.items.push(span ? { resource, scope, span } : spanItemWith(resource, scope, part(Span, t[at], t[at + 1]), traceId, spanId, parentSpanId))
          out.positions!.push(out.accepted)
        }
        out.places!.push(r, s, t[at + 3])
        out.accepted++
      }
    }
  }
  // Refused for their ids: counted by the scan, the first few worded here as idFault words them.
  const f = scanned.refused
  for (let at = 0; at < f.length; at += REFUSED_STRIDE) {
    const fault =
      idFault(buf, f[at + 3], f[at + 4], 16, 'traceId', true) ?? idFault(buf, f[at + 5], f[at + 6], 8, 'spanId', true) ?? idFault(buf, f[at + 7], f[at + 8], 8, 'parentSpanId', false)
    out.rejected.push({ path: spanPath(f[at], f[at + 1], f[at + 2]), message: fault! })
  }
  out.rejectedCount = scanned.refusedCount
  return out
}

export function decodeLogsProto(buf: Uint8Array, opts: DecodeOptions = {}): DecodedLogs {
  const req = decodeRequest(ExportLogsServiceRequest, buf, 'ExportLogsServiceRequest')
  const out: DecodedLogs = { signal: 'logs', items: [], rejected: [], rejectedCount: 0, apiKeys: [], places: [] }
  const resources = req.resourceLogs as Message[]
  for (let r = 0; r < resources.length; r++) {
    const rl = resources[r]
    const resource = resourceOf(rl.resource, opts, out.apiKeys)
    const scopes = rl.scopeLogs as Message[]
    for (let s = 0; s < scopes.length; s++) {
      const scope = scopeOf(scopes[s].scope)
      const records = scopes[s].logRecords as Message[]
      for (let i = 0; i < records.length; i++) {
        const lr = records[i]
        try {
          const item: LogItem = {
            resource,
            scope,
            log: {
              timeUnixNano: fixed64Decimal(lr.timeUnixNano as Int64),
              observedTimeUnixNano: fixed64Decimal(lr.observedTimeUnixNano as Int64),
              severityNumber: lr.severityNumber,
              severityText: lr.severityText,
              body: lr.body ? anyValue(lr.body) : null,
              attributes: attributesOf(lr.attributes),
              eventName: lr.eventName,
              traceId: idFromBytes(lr.traceId, 16, 'traceId', false),
              spanId: idFromBytes(lr.spanId, 8, 'spanId', false),
            },
          }
          out.items.push(item)
          out.places!.push(r, s, i)
        } catch (err) {
          reject(out, err, logPath, r, s, i)
        }
      }
    }
  }
  return out
}

const METRIC_DATA = ['gauge', 'sum', 'histogram', 'exponentialHistogram', 'summary'] as const

export function decodeMetricsProto(buf: Uint8Array, opts: DecodeOptions = {}): DecodedMetrics {
  const req = decodeRequest(ExportMetricsServiceRequest, buf, 'ExportMetricsServiceRequest')
  const out: DecodedMetrics = { signal: 'metrics', dataPoints: 0, rejected: [], rejectedCount: 0, apiKeys: [] }
  for (const rm of req.resourceMetrics as Message[]) {
    // Read for its key only: metrics are not stored.
    resourceOf(rm.resource, opts, out.apiKeys)
    for (const sm of rm.scopeMetrics as Message[]) {
      for (const m of sm.metrics as Message[]) {
        const data = m.data as (typeof METRIC_DATA)[number] | undefined
        if (data) out.dataPoints += m[data].dataPoints.length
      }
    }
  }
  return out
}

/** An item refused by an ItemError: counted, and described while among the first few (its path made only then). */
function reject(out: DecodedTraces | DecodedLogs, err: unknown, path: typeof spanPath, r: number, s: number, i: number): void {
  if (!(err instanceof ItemError)) throw err
  if (describeRejection(out)) out.rejected.push({ path: path(r, s, i), message: err.message })
}

function resourceOf(res: Message, opts: DecodeOptions, keys: string[]): OtlpResource {
  const attributes = res ? attributesOf(res.attributes) : {}
  takeApiKeys(attributes, opts.apiKeyAttributes, keys)
  return { attributes }
}

function scopeOf(scope: Message): OtlpScope {
  return scope ? { name: scope.name, version: scope.version } : { name: '', version: '' }
}

function attributesOf(list: Message[]): Attributes {
  const out: Attributes = {}
  for (let i = 0; i < list.length; i++) {
    const kv = list[i]
    setAttribute(out, kv.key, kv.value ? anyValue(kv.value) : null)
  }
  return out
}

const own = Object.prototype.hasOwnProperty

/** The AnyValue field present on the wire (an own property: proto/…/common.proto keeps presence). */
function anyValue(v: Message): AttributeValue {
  if (own.call(v, 'stringValue')) return v.stringValue
  if (own.call(v, 'intValue')) return int64Value(v.intValue as Int64)
  if (own.call(v, 'doubleValue')) return v.doubleValue
  if (own.call(v, 'boolValue')) return v.boolValue
  if (own.call(v, 'arrayValue')) {
    const values = v.arrayValue.values as Message[]
    const out: AttributeValue[] = new Array(values.length)
    for (let i = 0; i < values.length; i++) out[i] = anyValue(values[i])
    return out
  }
  if (own.call(v, 'kvlistValue')) return attributesOf(v.kvlistValue.values)
  if (own.call(v, 'bytesValue')) {
    const b = v.bytesValue as Uint8Array
    return Buffer.from(b.buffer, b.byteOffset, b.length).toString('base64')
  }
  return null // an empty AnyValue
}
