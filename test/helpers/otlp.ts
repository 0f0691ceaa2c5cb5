/**
 * OTLP test helpers: real OTel SDK spans and log records (in-memory exporters), their OTLP
 * encodings as the stock exporters write them, and OTLP/JSON fixtures re-encoded as protobuf.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Attributes as OtelAttributes } from '@opentelemetry/api'
import { JsonLogsSerializer, JsonTraceSerializer, ProtobufLogsSerializer, ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer'
import { resourceFromAttributes } from '@opentelemetry/resources'
import { InMemoryLogRecordExporter, LoggerProvider, SimpleLogRecordProcessor, type ReadableLogRecord } from '@opentelemetry/sdk-logs'
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider, type ReadableSpan } from '@opentelemetry/sdk-trace'
import type { Tracer } from '@opentelemetry/api'
import type { Logger } from '@opentelemetry/api'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { ExportLogsServiceRequest, ExportMetricsServiceRequest, ExportTraceServiceRequest } from '../../src/transport/otlp/proto.js'

export const FIXTURES = join(PACKAGE_ROOT, 'test', 'fixtures', 'otlp')

export function fixture(name: string): any {
  return JSON.parse(readFileSync(join(FIXTURES, name), 'utf8'))
}

/** Spans recorded by a real SDK tracer. */
export async function sdkSpans(resource: OtelAttributes, record: (tracer: Tracer) => void): Promise<ReadableSpan[]> {
  const exporter = new InMemorySpanExporter()
  const provider = new TracerProvider({ resource: resourceFromAttributes(resource), spanProcessors: [new SimpleSpanProcessor({ exporter })] })
  record(provider.getTracer('test-scope', '1.2.3'))
  await provider.forceFlush()
  const spans = exporter.getFinishedSpans()
  await provider.shutdown()
  return spans
}

/** Log records emitted through a real SDK logger. */
export async function sdkLogs(resource: OtelAttributes, scope: string, emit: (logger: Logger) => void): Promise<ReadableLogRecord[]> {
  const exporter = new InMemoryLogRecordExporter()
  const provider = new LoggerProvider({ resource: resourceFromAttributes(resource), processors: [new SimpleLogRecordProcessor({ exporter })] })
  emit(provider.getLogger(scope))
  await provider.forceFlush()
  const records = exporter.getFinishedLogRecords()
  await provider.shutdown()
  return records
}

/** What the stock exporters put on the wire: protobuf bytes and OTLP/JSON (parsed). */
export function encodeSpans(spans: ReadableSpan[]): { proto: Uint8Array; json: unknown } {
  return { proto: ProtobufTraceSerializer.serializeRequest(spans)!, json: JSON.parse(Buffer.from(JsonTraceSerializer.serializeRequest(spans)!).toString('utf8')) }
}

export function encodeLogs(records: ReadableLogRecord[]): { proto: Uint8Array; json: unknown } {
  return { proto: ProtobufLogsSerializer.serializeRequest(records)!, json: JSON.parse(Buffer.from(JsonLogsSerializer.serializeRequest(records)!).toString('utf8')) }
}

const ID_FIELDS = new Set(['traceId', 'spanId', 'parentSpanId'])

/** OTLP/JSON → the same request as protobuf bytes (hex ids become bytes; the rest maps by name). */
export function protoOf(signal: 'traces' | 'logs' | 'metrics', json: unknown): Uint8Array {
  const type = signal === 'traces' ? ExportTraceServiceRequest : signal === 'logs' ? ExportLogsServiceRequest : ExportMetricsServiceRequest
  const withBytes = (v: unknown, key?: string): unknown => {
    if (key && ID_FIELDS.has(key) && typeof v === 'string') return Buffer.from(v, 'hex')
    if (v instanceof Uint8Array) return v
    if (Array.isArray(v)) return v.map((x) => withBytes(x))
    if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, withBytes(x, k)]))
    return v
  }
  return type.encode(type.fromObject(withBytes(json) as Record<string, unknown>)).finish()
}

/** A minimal OTLP/JSON export of spans with the given attributes (values as OTLP AnyValues). */
export function jsonSpans(spans: Record<string, unknown>[], resource: Record<string, unknown>[] = []): unknown {
  return { resourceSpans: [{ resource: { attributes: resource }, scopeSpans: [{ scope: { name: 'test' }, spans }] }] }
}

/** The usage records (kind and body) the genai connector makes of an OTLP/JSON fixture, and what it rejected. */
export interface ConnectorRun {
  records: { kind: string; body: Record<string, unknown> }[]
  rejected: { index: number; message: string }[]
  /** The request-level error, when every item was rejected. */
  error?: Error
}
