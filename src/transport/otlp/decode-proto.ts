import protobuf from 'protobufjs'
import { invalid } from '../../core/errors.js'
import type { AttributeValue, Attributes, LogItem, OtlpResource, OtlpScope, SpanItem } from '../../model/otlp.js'
import type { DecodeOptions, DecodedLogs, DecodedMetrics, DecodedTraces, ItemRejection } from './batch.js'
import { ExportLogsServiceRequest, ExportMetricsServiceRequest, ExportTraceServiceRequest } from './proto.js'
import { ItemError, fixed64Decimal, idFromBytes, int64Value, setAttribute, takeApiKeys, type Int64 } from './values.js'

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

export function decodeTracesProto(buf: Uint8Array, opts: DecodeOptions = {}): DecodedTraces {
  const req = decodeRequest(ExportTraceServiceRequest, buf, 'ExportTraceServiceRequest')
  const out: DecodedTraces = { signal: 'traces', items: [], rejected: [], apiKeys: [] }
  const resources = req.resourceSpans as Message[]
  for (let r = 0; r < resources.length; r++) {
    const rs = resources[r]
    const resource = resourceOf(rs.resource, opts, out.apiKeys)
    const scopes = rs.scopeSpans as Message[]
    for (let s = 0; s < scopes.length; s++) {
      const scope = scopeOf(scopes[s].scope)
      const spans = scopes[s].spans as Message[]
      for (let i = 0; i < spans.length; i++) {
        const sp = spans[i]
        try {
          const status = sp.status
          const item: SpanItem = {
            resource,
            scope,
            span: {
              traceId: idFromBytes(sp.traceId, 16, 'traceId', true),
              spanId: idFromBytes(sp.spanId, 8, 'spanId', true),
              parentSpanId: idFromBytes(sp.parentSpanId, 8, 'parentSpanId', false),
              name: sp.name,
              kind: sp.kind,
              startTimeUnixNano: fixed64Decimal(sp.startTimeUnixNano as Int64),
              endTimeUnixNano: fixed64Decimal(sp.endTimeUnixNano as Int64),
              attributes: attributesOf(sp.attributes),
              status: status ? { code: status.code, message: status.message } : { code: 0, message: '' },
            },
          }
          out.items.push(item)
        } catch (err) {
          reject(out.rejected, err, `resourceSpans[${r}].scopeSpans[${s}].spans[${i}]`)
        }
      }
    }
  }
  return out
}

export function decodeLogsProto(buf: Uint8Array, opts: DecodeOptions = {}): DecodedLogs {
  const req = decodeRequest(ExportLogsServiceRequest, buf, 'ExportLogsServiceRequest')
  const out: DecodedLogs = { signal: 'logs', items: [], rejected: [], apiKeys: [] }
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
        } catch (err) {
          reject(out.rejected, err, `resourceLogs[${r}].scopeLogs[${s}].logRecords[${i}]`)
        }
      }
    }
  }
  return out
}

const METRIC_DATA = ['gauge', 'sum', 'histogram', 'exponentialHistogram', 'summary'] as const

export function decodeMetricsProto(buf: Uint8Array, opts: DecodeOptions = {}): DecodedMetrics {
  const req = decodeRequest(ExportMetricsServiceRequest, buf, 'ExportMetricsServiceRequest')
  const out: DecodedMetrics = { signal: 'metrics', dataPoints: 0, rejected: [], apiKeys: [] }
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

function reject(into: ItemRejection[], err: unknown, path: string): void {
  if (!(err instanceof ItemError)) throw err
  into.push({ path, message: err.message })
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
