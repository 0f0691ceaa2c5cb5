import { invalid } from '../../core/errors.js'
import type { AttributeValue, Attributes, LogItem, OtlpResource, OtlpScope, SpanItem } from '../../model/otlp.js'
import { describeRejection, type DecodeOptions, type DecodedLogs, type DecodedMetrics, type DecodedTraces } from './batch.js'
import { ItemError, idFromJson, setAttribute, takeApiKeys } from './values.js'

/*
 * OTLP/JSON (the protobuf JSON mapping with OTLP's exceptions) → items, from the parsed body.
 * Keys are lowerCamelCase; trace and span ids are hex; 64-bit integers come as numbers or
 * decimal strings; enums as integers (their names are accepted too). A value of the wrong type
 * rejects the span or log record it belongs to (a bad resource or scope rejects its items),
 * and the rest of the request stands; only a body that is not an export request at all is a 400.
 */

type Json = Record<string, unknown>

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v)

function requestOf(body: unknown, field: string, what: string): unknown[] {
  if (!isObject(body)) throw invalid('invalid_otlp', `the body must be an OTLP/JSON ${what} object`)
  const list = body[field]
  if (list === undefined || list === null) return []
  if (!Array.isArray(list)) throw invalid('invalid_otlp', `${field} must be an array`, field)
  return list
}

/** Elements of an optional repeated field: absent or null is empty, anything else but an array is an error. */
function listOf(v: unknown, name: string): unknown[] {
  if (v === undefined || v === null) return []
  if (!Array.isArray(v)) throw new ItemError(`${name} must be an array`)
  return v
}

export function decodeTracesJson(body: unknown, opts: DecodeOptions = {}): DecodedTraces {
  const out: DecodedTraces = { signal: 'traces', items: [], accepted: 0, rejected: [], rejectedCount: 0, apiKeys: [], places: [] }
  const resources = requestOf(body, 'resourceSpans', 'ExportTraceServiceRequest')
  for (let r = 0; r < resources.length; r++) {
    const at = `resourceSpans[${r}]`
    eachScope(out, at, resources[r], 'scopeSpans', opts, out.apiKeys, (resource, scope, ss, sAt, s) => {
      const spans = listOf(ss.spans, 'spans')
      for (let i = 0; i < spans.length; i++) {
        // The common refusals first, without an exception: a flood of `{}` costs a count each.
        const fault = spanFault(spans[i])
        if (fault !== undefined) {
          if (describeRejection(out)) out.rejected.push({ path: `${sAt}.spans[${i}]`, message: fault })
          continue
        }
        try {
          out.items.push(spanItem(resource, scope, spans[i]))
          out.places!.push(r, s, i)
        } catch (err) {
          reject(out, err, sAt, 'spans', i)
        }
      }
    })
  }
  out.accepted = out.items.length
  if (opts.spans) readOnly(out, opts.spans.attributePrefixes)
  return out
}

/** Keeps the items a consumer reads (DecodeOptions.spans): a key of the span or of its resource starts with a prefix. */
function readOnly(out: DecodedTraces, prefixes: readonly string[]): void {
  const all = out.items
  out.items = []
  out.positions = []
  const starts = (attributes: Attributes): boolean => {
    for (const key in attributes) for (const p of prefixes) if (key.startsWith(p)) return true
    return false
  }
  for (let i = 0; i < all.length; i++)
    if (starts(all[i].resource.attributes) || starts(all[i].span.attributes)) {
      out.items.push(all[i])
      out.positions.push(i)
    }
}

export function decodeLogsJson(body: unknown, opts: DecodeOptions = {}): DecodedLogs {
  const out: DecodedLogs = { signal: 'logs', items: [], rejected: [], rejectedCount: 0, apiKeys: [], places: [] }
  const resources = requestOf(body, 'resourceLogs', 'ExportLogsServiceRequest')
  for (let r = 0; r < resources.length; r++) {
    const at = `resourceLogs[${r}]`
    eachScope(out, at, resources[r], 'scopeLogs', opts, out.apiKeys, (resource, scope, sl, sAt, s) => {
      const records = listOf(sl.logRecords, 'logRecords')
      for (let i = 0; i < records.length; i++) {
        try {
          out.items.push(logItem(resource, scope, records[i]))
          out.places!.push(r, s, i)
        } catch (err) {
          reject(out, err, sAt, 'logRecords', i)
        }
      }
    })
  }
  return out
}

const METRIC_DATA = ['gauge', 'sum', 'histogram', 'exponentialHistogram', 'summary']

export function decodeMetricsJson(body: unknown, opts: DecodeOptions = {}): DecodedMetrics {
  const out: DecodedMetrics = { signal: 'metrics', dataPoints: 0, rejected: [], rejectedCount: 0, apiKeys: [] }
  const resources = requestOf(body, 'resourceMetrics', 'ExportMetricsServiceRequest')
  for (let r = 0; r < resources.length; r++) {
    eachScope(out, `resourceMetrics[${r}]`, resources[r], 'scopeMetrics', opts, out.apiKeys, (_res, _scope, sm, sAt) => {
      const metrics = listOf(sm.metrics, 'metrics')
      for (let i = 0; i < metrics.length; i++) {
        const m = metrics[i]
        if (!isObject(m)) {
          if (describeRejection(out)) out.rejected.push({ path: `${sAt}.metrics[${i}]`, message: 'a metric must be an object' })
          continue
        }
        for (const kind of METRIC_DATA) {
          const data = m[kind]
          if (isObject(data) && Array.isArray(data.dataPoints)) out.dataPoints += data.dataPoints.length
        }
      }
    })
  }
  return out
}

/** Walks one resource's scopes; a problem with the resource or a scope rejects what it holds. */
function eachScope(
  out: Decoded,
  at: string,
  rv: unknown,
  scopesField: string,
  opts: DecodeOptions,
  keys: string[],
  visit: (resource: OtlpResource, scope: OtlpScope, scopeJson: Json, scopeAt: string, s: number) => void,
): void {
  let resource: OtlpResource
  let scopes: unknown[]
  try {
    if (!isObject(rv)) throw new ItemError('must be an object')
    resource = resourceOf(rv.resource, opts, keys)
    scopes = listOf(rv[scopesField], scopesField)
  } catch (err) {
    return reject(out, err, at)
  }
  for (let s = 0; s < scopes.length; s++) {
    const sAt = `${at}.${scopesField}[${s}]`
    try {
      const sv = scopes[s]
      if (!isObject(sv)) throw new ItemError('must be an object')
      visit(resource, scopeOf(sv.scope), sv, sAt, s)
    } catch (err) {
      reject(out, err, sAt)
    }
  }
}

type Decoded = DecodedTraces | DecodedLogs | DecodedMetrics

/** An item refused by an ItemError: counted, and described while among the first few (`at`, or `at.field[i]`, made only then). */
function reject(out: Decoded, err: unknown, at: string, field?: string, i?: number): void {
  if (!(err instanceof ItemError)) throw err
  if (describeRejection(out)) out.rejected.push({ path: field === undefined ? at : `${at}.${field}[${i}]`, message: err.message })
}

/** What spanItem would refuse first in a span that is not an object or lacks a required id; undefined for any other span. */
function spanFault(v: unknown): string | undefined {
  if (!isObject(v)) return 'a span must be an object'
  if (v.status !== undefined && v.status !== null && !isObject(v.status)) return 'status must be an object'
  if (v.traceId === undefined || v.traceId === null || v.traceId === '') return 'traceId is required'
  if (v.spanId === undefined || v.spanId === null || v.spanId === '') return 'spanId is required'
  return undefined
}

function spanItem(resource: OtlpResource, scope: OtlpScope, v: unknown): SpanItem {
  if (!isObject(v)) throw new ItemError('a span must be an object')
  const status = v.status
  if (status !== undefined && status !== null && !isObject(status)) throw new ItemError('status must be an object')
  return {
    resource,
    scope,
    span: {
      traceId: idFromJson(v.traceId, 16, 'traceId', true),
      spanId: idFromJson(v.spanId, 8, 'spanId', true),
      parentSpanId: idFromJson(v.parentSpanId, 8, 'parentSpanId', false),
      name: str(v.name, 'name'),
      kind: enumOf(v.kind, 'kind', SPAN_KINDS),
      startTimeUnixNano: nanos(v.startTimeUnixNano, 'startTimeUnixNano'),
      endTimeUnixNano: nanos(v.endTimeUnixNano, 'endTimeUnixNano'),
      attributes: attributesOf(v.attributes, 'attributes'),
      status: status ? { code: enumOf(status.code, 'status.code', STATUS_CODES), message: str(status.message, 'status.message') } : { code: 0, message: '' },
    },
  }
}

function logItem(resource: OtlpResource, scope: OtlpScope, v: unknown): LogItem {
  if (!isObject(v)) throw new ItemError('a log record must be an object')
  return {
    resource,
    scope,
    log: {
      timeUnixNano: nanos(v.timeUnixNano, 'timeUnixNano'),
      observedTimeUnixNano: nanos(v.observedTimeUnixNano, 'observedTimeUnixNano'),
      severityNumber: enumOf(v.severityNumber, 'severityNumber', SEVERITIES),
      severityText: str(v.severityText, 'severityText'),
      body: v.body === undefined || v.body === null ? null : anyValue(v.body, 'body'),
      attributes: attributesOf(v.attributes, 'attributes'),
      eventName: str(v.eventName, 'eventName'),
      traceId: idFromJson(v.traceId, 16, 'traceId', false),
      spanId: idFromJson(v.spanId, 8, 'spanId', false),
    },
  }
}

function resourceOf(v: unknown, opts: DecodeOptions, keys: string[]): OtlpResource {
  if (v === undefined || v === null) return { attributes: {} }
  if (!isObject(v)) throw new ItemError('resource must be an object')
  const attributes = attributesOf(v.attributes, 'resource.attributes')
  takeApiKeys(attributes, opts.apiKeyAttributes, keys)
  return { attributes }
}

function scopeOf(v: unknown): OtlpScope {
  if (v === undefined || v === null) return { name: '', version: '' }
  if (!isObject(v)) throw new ItemError('scope must be an object')
  return { name: str(v.name, 'scope.name'), version: str(v.version, 'scope.version') }
}

function str(v: unknown, name: string): string {
  if (v === undefined || v === null) return ''
  if (typeof v !== 'string') throw new ItemError(`${name} must be a string`)
  return v
}

const UINT = /^\d{1,20}$/
const INT = /^-?\d{1,19}$/

const MAX_FIXED64 = 2n ** 64n - 1n

/**
 * A fixed64 timestamp: a decimal string or a non-negative integer number, at most 2^64 − 1 as in
 * protobuf; '0' when absent. Beyond it (1e30) a time is past what a Date holds: writing it threw
 * a RangeError, a 503 the exporter retried for ever.
 */
function nanos(v: unknown, name: string): string {
  if (v === undefined || v === null || v === '') return '0'
  if (typeof v === 'string' && UINT.test(v)) {
    if (v.length === 20 && BigInt(v) > MAX_FIXED64) throw new ItemError(`${name} must be at most 2^64 - 1 nanoseconds`)
    return v.length > 1 && v[0] === '0' ? String(BigInt(v)) : v
  }
  if (typeof v === 'number' && Number.isInteger(v) && v >= 0) {
    if (v >= 2 ** 64) throw new ItemError(`${name} must be at most 2^64 - 1 nanoseconds`)
    return BigInt(v).toString()
  }
  throw new ItemError(`${name} must be nanoseconds as a decimal string or an integer`)
}

function enumOf(v: unknown, name: string, names: Record<string, number>): number {
  if (v === undefined || v === null) return 0
  if (typeof v === 'number' && Number.isInteger(v)) return v
  if (typeof v === 'string') {
    if (/^-?\d+$/.test(v)) return Number(v)
    const n = names[v]
    if (n !== undefined) return n
  }
  throw new ItemError(`${name} must be an enum number`)
}

const SPAN_KINDS: Record<string, number> = {
  SPAN_KIND_UNSPECIFIED: 0, SPAN_KIND_INTERNAL: 1, SPAN_KIND_SERVER: 2, SPAN_KIND_CLIENT: 3, SPAN_KIND_PRODUCER: 4, SPAN_KIND_CONSUMER: 5,
}
const STATUS_CODES: Record<string, number> = { STATUS_CODE_UNSET: 0, STATUS_CODE_OK: 1, STATUS_CODE_ERROR: 2 }
const SEVERITIES: Record<string, number> = Object.fromEntries(
  ['UNSPECIFIED', 'TRACE', 'TRACE2', 'TRACE3', 'TRACE4', 'DEBUG', 'DEBUG2', 'DEBUG3', 'DEBUG4', 'INFO', 'INFO2', 'INFO3', 'INFO4',
    'WARN', 'WARN2', 'WARN3', 'WARN4', 'ERROR', 'ERROR2', 'ERROR3', 'ERROR4', 'FATAL', 'FATAL2', 'FATAL3', 'FATAL4'].map((s, i) => [`SEVERITY_NUMBER_${s}`, i]),
)

function attributesOf(v: unknown, name: string): Attributes {
  const out: Attributes = {}
  if (v === undefined || v === null) return out
  if (!Array.isArray(v)) throw new ItemError(`${name} must be an array of {key, value}`)
  for (let i = 0; i < v.length; i++) {
    const kv = v[i]
    if (!isObject(kv) || typeof kv.key !== 'string') throw new ItemError(`${name}[${i}] must be {key, value} with a string key`)
    setAttribute(out, kv.key, kv.value === undefined || kv.value === null ? null : anyValue(kv.value, `${name}[${kv.key}]`))
  }
  return out
}

/** An AnyValue; the first field set wins, as protobuf's JSON parsers read a oneof. */
function anyValue(v: unknown, name: string): AttributeValue {
  if (!isObject(v)) throw new ItemError(`${name} must be an AnyValue object such as {"stringValue": "…"}`)
  if (v.stringValue !== undefined) {
    if (typeof v.stringValue !== 'string') throw new ItemError(`${name}.stringValue must be a string`)
    return v.stringValue
  }
  if (v.intValue !== undefined) return int64(v.intValue, `${name}.intValue`)
  if (v.doubleValue !== undefined) return double(v.doubleValue, `${name}.doubleValue`)
  if (v.boolValue !== undefined) {
    if (typeof v.boolValue !== 'boolean') throw new ItemError(`${name}.boolValue must be true or false`)
    return v.boolValue
  }
  if (v.arrayValue !== undefined) {
    const a = v.arrayValue
    if (!isObject(a)) throw new ItemError(`${name}.arrayValue must be {"values": [...]}`)
    const values = a.values === undefined || a.values === null ? [] : a.values
    if (!Array.isArray(values)) throw new ItemError(`${name}.arrayValue.values must be an array`)
    return values.map((x, i) => anyValue(x, `${name}[${i}]`))
  }
  if (v.kvlistValue !== undefined) {
    const kv = v.kvlistValue
    if (!isObject(kv)) throw new ItemError(`${name}.kvlistValue must be {"values": [...]}`)
    return attributesOf(kv.values, name)
  }
  if (v.bytesValue !== undefined) {
    if (typeof v.bytesValue !== 'string') throw new ItemError(`${name}.bytesValue must be a base64 string`)
    return v.bytesValue
  }
  return null
}

/** int64: an integer number or a decimal string; a number while it is exact, else the string. */
function int64(v: unknown, name: string): number | string {
  if (typeof v === 'number' && Number.isInteger(v)) return Number.isSafeInteger(v) ? v : BigInt(v).toString()
  if (typeof v === 'string' && INT.test(v)) {
    const n = Number(v)
    return Number.isSafeInteger(n) ? n : String(BigInt(v))
  }
  throw new ItemError(`${name} must be an integer or a decimal string`)
}

/** double: a number, a numeric string, or proto3 JSON's "NaN", "Infinity", "-Infinity". */
function double(v: unknown, name: string): number {
  if (typeof v === 'number') return v
  if (typeof v === 'string' && v.trim() !== '') {
    const n = Number(v)
    if (!Number.isNaN(n) || v === 'NaN') return n
  }
  throw new ItemError(`${name} must be a number`)
}
