/**
 * The items of the `traces` and `logs` signals (DESIGN §2): one decoded span or log record each,
 * carrying its resource and scope, so a batch can be split, routed and mapped item by item
 * (the OTLP receiver produces them; the genai connector turns them into UsageRecords; the
 * routing connector and processors read their fields).
 *
 * Attribute values are OTLP AnyValues turned into plain JavaScript: strings, numbers (intValue
 * arrives as a string or number and is read as a number; beyond 2^53 it stays a decimal string),
 * booleans, arrays and objects (kvlistValue); bytesValue becomes a base64 string.
 */

export type AttributeValue = string | number | boolean | null | AttributeValue[] | { [key: string]: AttributeValue }

/** Attributes by key, in the order they were sent. */
export type Attributes = Record<string, AttributeValue>

export interface OtlpResource {
  attributes: Attributes
}

export interface OtlpScope {
  name: string
  version: string
}

export interface SpanStatus {
  /** 0 unset, 1 ok, 2 error. */
  code: number
  message: string
}

export interface Span {
  /** Lowercase hex, 32 characters. */
  traceId: string
  /** Lowercase hex, 16 characters. */
  spanId: string
  /** Lowercase hex or '' for a root span. */
  parentSpanId: string
  name: string
  /** 0 unspecified, 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number
  /** Nanoseconds since the epoch as a decimal string (exceeds 2^53). */
  startTimeUnixNano: string
  endTimeUnixNano: string
  attributes: Attributes
  status: SpanStatus
}

export interface LogRecord {
  /** Nanoseconds since the epoch as a decimal string; '0' when unset. */
  timeUnixNano: string
  observedTimeUnixNano: string
  severityNumber: number
  severityText: string
  /** The body as a plain value (a string for most event records). */
  body: AttributeValue
  attributes: Attributes
  /** OTLP's LogRecord.event_name; '' when unset. */
  eventName: string
  traceId: string
  spanId: string
}

/** A `traces` item: one span with where it came from. */
export interface SpanItem {
  resource: OtlpResource
  scope: OtlpScope
  span: Span
}

/** A `logs` item: one log record with where it came from. */
export interface LogItem {
  resource: OtlpResource
  scope: OtlpScope
  log: LogRecord
}
