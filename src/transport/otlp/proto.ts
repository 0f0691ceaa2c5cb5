import { join } from 'node:path'
import protobuf from 'protobufjs'
import { PACKAGE_ROOT } from '../../core/paths.js'

/**
 * The OTLP messages meterd decodes and answers with, loaded once by reflection from the .proto
 * files under `proto/` (written from the OTLP specification; only the fields meterd reads).
 * protobufjs compiles a decoder per type on first use, so reflection decodes as fast as
 * generated static code; unknown fields (span events, links, data point values) are skipped.
 */
export const PROTO_DIR = join(PACKAGE_ROOT, 'proto')

const FILES = [
  'opentelemetry/proto/collector/trace/v1/trace_service.proto',
  'opentelemetry/proto/collector/logs/v1/logs_service.proto',
  'opentelemetry/proto/collector/metrics/v1/metrics_service.proto',
  'google/rpc/status.proto',
  'google/rpc/error_details.proto',
]

const root = new protobuf.Root()
// Imports are relative to proto/; google/protobuf/{any,duration}.proto come bundled with protobufjs.
root.resolvePath = (_origin, target) => join(PROTO_DIR, target)
root.loadSync(FILES)
root.resolveAll()

const type = (name: string): protobuf.Type => root.lookupType(name)

export const ExportTraceServiceRequest = type('opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest')
export const ExportTraceServiceResponse = type('opentelemetry.proto.collector.trace.v1.ExportTraceServiceResponse')
export const ExportLogsServiceRequest = type('opentelemetry.proto.collector.logs.v1.ExportLogsServiceRequest')
export const ExportLogsServiceResponse = type('opentelemetry.proto.collector.logs.v1.ExportLogsServiceResponse')
export const ExportMetricsServiceRequest = type('opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest')
export const ExportMetricsServiceResponse = type('opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceResponse')
export const RpcStatus = type('google.rpc.Status')
export const RetryInfo = type('google.rpc.RetryInfo')
export const BadRequest = type('google.rpc.BadRequest')

/** The gRPC service and method of each signal's Export call. */
export const SERVICES = {
  traces: 'opentelemetry.proto.collector.trace.v1.TraceService',
  logs: 'opentelemetry.proto.collector.logs.v1.LogsService',
  metrics: 'opentelemetry.proto.collector.metrics.v1.MetricsService',
} as const

/** The parts of a trace export decoded one by one when only some spans are read (scan-traces.ts). */
export const Span = type('opentelemetry.proto.trace.v1.Span')
export const Resource = type('opentelemetry.proto.resource.v1.Resource')
export const InstrumentationScope = type('opentelemetry.proto.common.v1.InstrumentationScope')
