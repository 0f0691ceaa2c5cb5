import protobuf from 'protobufjs'
import { REJECTIONS_DESCRIBED } from './batch.js'
import { WireReader } from './wire.js'

/*
 * A first pass over an ExportTraceServiceRequest's bytes, for a consumer that reads only some
 * spans (Consumer.spanInterest): it walks the whole message as protobufjs would decode it with
 * meterd's protos, building nothing, and notes where each resource, scope and span is, where
 * each span's ids are, and whether any attribute key of a span (or of its resource) starts with
 * one of the prefixes. It checks each span's ids as it goes: a span with a bad id is counted and
 * left out of the table (the first few noted, for the answer to name). decode-proto.ts then
 * decodes only the resources and the spans that are read.
 *
 * The scan vouches for a message only where it is sure protobufjs would accept it: every length
 * within its message, every string valid UTF-8 (protobufjs's own strict reader for the non-ASCII
 * ones), fields of the wrong wire type skipped as unknown ones (as protobufjs does). Anything
 * else it does not follow — what wire.ts's reader refuses (a group, a field number 0, a tag or
 * length of five bytes or more, bytes past a message's end), nesting deeper than MAX_DEPTH, a
 * resource or scope given twice — makes it give up
 * (undefined), and the caller decodes the whole request with protobufjs instead, whose answer
 * (an error, or the items) is then the same as without the scan.
 */

/** Thrown inside the scan when it cannot vouch for the message (as is the reader's WireError); never escapes. */
const UNSURE = new Error('the scan gives up; protobufjs decides')

/** AnyValue nesting followed (protobufjs allows 100); deeper requests go to protobufjs. */
const MAX_DEPTH = 24

/**
 * Per span, in ScannedTraces.spans: start, end, read (0/1), its index in its scope's `spans`, then
 * start/end of trace_id, span_id, parent_span_id.
 */
export const SPAN_STRIDE = 10

/** Per refused span, in ScannedTraces.refused: the indices of its resource, scope and of it in the scope, then start/end of its three ids. */
export const REFUSED_STRIDE = 9

export interface ScannedScope {
  /** The InstrumentationScope message's bytes [start, end), when present. */
  scope?: [number, number]
  /** Index of its first span in the span table, and how many (its spans with good ids). */
  first: number
  count: number
}

export interface ScannedResource {
  resource?: [number, number]
  /** Whether an attribute key of the resource starts with one of the prefixes (then every span of it is read). */
  read: boolean
  scopes: ScannedScope[]
}

export interface ScannedTraces {
  resources: ScannedResource[]
  /** SPAN_STRIDE numbers per span whose ids are good, in order. */
  spans: number[]
  /**
   * The spans whose ids are bad (a required one absent, a wrong length, all zero), refused: how
   * many, and the first REJECTIONS_DESCRIBED as REFUSED_STRIDE numbers each, whose
   * ids decode-proto.ts words. A refused span costs the scan a count, nothing kept: an export of
   * two million empty spans (4 MB) held the event loop for seconds when each was a table entry.
   */
  refusedCount: number
  refused: number[]
}

const utf8 = (protobuf.util as unknown as { utf8: { readStrict(buf: Uint8Array, start: number, end: number): string } }).utf8

class Scanner extends WireReader {
  readonly spans: number[] = []
  readonly resources: ScannedResource[] = []
  readonly refused: number[] = []
  refusedCount = 0

  /** Whether some prefix starts with a byte: most keys are ruled out by their first byte. */
  private readonly first = new Uint8Array(256)

  constructor(
    buf: Buffer,
    private readonly prefixes: readonly Uint8Array[],
  ) {
    super(buf)
    for (const p of prefixes) this.first[p.length ? p[0] : 0] = 1
  }

  /** A `string` field: valid UTF-8, as protobufjs's strict reader requires. */
  private string(end: number): void {
    const n = this.length(end)
    this.utf8(this.pos, this.pos + n)
    this.pos += n
  }

  private utf8(start: number, stop: number): void {
    const b = this.buf
    let i = start
    while (i + 8 <= stop && ((b[i] | b[i + 1] | b[i + 2] | b[i + 3] | b[i + 4] | b[i + 5] | b[i + 6] | b[i + 7]) & 128) === 0) i += 8
    for (; i < stop; i++)
      if (b[i] >= 128) {
        try {
          utf8.readStrict(b, start, stop)
        } catch {
          throw UNSURE
        }
        return
      }
  }

  /** A KeyValue's key (a `string` field): whether it starts with one of the prefixes. */
  private key(end: number): boolean {
    const n = this.length(end)
    const start = this.pos
    this.utf8(start, start + n)
    this.pos += n
    const b = this.buf
    if (n > 0 && this.first[b[start]] === 0 && this.first[0] === 0) return false
    for (const p of this.prefixes) {
      if (p.length > n) continue
      let i = 0
      while (i < p.length && b[start + i] === p[i]) i++
      if (i === p.length) return true
    }
    return false
  }

  request(end: number): void {
    while (this.pos < end) {
      const t = this.tag(end)
      if (t === ((1 << 3) | 2)) {
        const n = this.length(end)
        this.resourceSpans(this.pos + n)
      } else this.skip(t & 7, end)
    }
  }

  private resourceSpans(end: number): void {
    const r: ScannedResource = { read: false, scopes: [] }
    this.resources.push(r)
    while (this.pos < end) {
      const t = this.tag(end)
      switch (t) {
        case (1 << 3) | 2: {
          if (r.resource) throw UNSURE // protobufjs merges a repeated message field
          const n = this.length(end)
          const start = this.pos
          r.read = this.keyValues(start + n, 1, 0)
          r.resource = [start, start + n]
          break
        }
        case (2 << 3) | 2: {
          const n = this.length(end)
          r.scopes.push(this.scopeSpans(this.pos + n, this.resources.length - 1, r.scopes.length))
          break
        }
        case (3 << 3) | 2:
          this.string(end)
          break
        default:
          this.skip(t & 7, end)
      }
    }
  }

  private scopeSpans(end: number, resource: number, scope: number): ScannedScope {
    const s: ScannedScope = { first: this.spans.length / SPAN_STRIDE, count: 0 }
    let index = 0
    while (this.pos < end) {
      const t = this.tag(end)
      switch (t) {
        case (1 << 3) | 2: {
          if (s.scope) throw UNSURE
          const n = this.length(end)
          const start = this.pos
          this.instrumentationScope(start + n)
          s.scope = [start, start + n]
          break
        }
        case (2 << 3) | 2: {
          const n = this.length(end)
          if (this.span(this.pos + n, resource, scope, index++)) s.count++
          break
        }
        case (3 << 3) | 2:
          this.string(end)
          break
        default:
          this.skip(t & 7, end)
      }
    }
    return s
  }

  private instrumentationScope(end: number): void {
    while (this.pos < end) {
      const t = this.tag(end)
      if (t === ((1 << 3) | 2) || t === ((2 << 3) | 2)) this.string(end)
      else this.skip(t & 7, end)
    }
  }

  /** Whether the span's ids are good (it is then in the table; else it is counted refused). */
  private span(end: number, resource: number, scope: number, index: number): boolean {
    const start = this.pos
    let read = 0
    let traceStart = 0
    let traceEnd = 0
    let spanStart = 0
    let spanEnd = 0
    let parentStart = 0
    let parentEnd = 0
    while (this.pos < end) {
      const t = this.tag(end)
      switch (t) {
        case (1 << 3) | 2: {
          const n = this.length(end)
          traceStart = this.pos
          traceEnd = this.pos += n
          break
        }
        case (2 << 3) | 2: {
          const n = this.length(end)
          spanStart = this.pos
          spanEnd = this.pos += n
          break
        }
        case (4 << 3) | 2: {
          const n = this.length(end)
          parentStart = this.pos
          parentEnd = this.pos += n
          break
        }
        case (5 << 3) | 2:
          this.string(end)
          break
        case (9 << 3) | 2: {
          const n = this.length(end)
          if (this.keyValue(this.pos + n, 0)) read = 1
          break
        }
        case (15 << 3) | 2: {
          const n = this.length(end)
          this.status(this.pos + n)
          break
        }
        default:
          // kind (6, varint) and the times (7, 8, fixed64) are skipped like unknown fields.
          this.skip(t & 7, end)
      }
    }
    if (this.idGood(traceStart, traceEnd, 16, true) && this.idGood(spanStart, spanEnd, 8, true) && this.idGood(parentStart, parentEnd, 8, false)) {
      this.spans.push(start, end, read, index, traceStart, traceEnd, spanStart, spanEnd, parentStart, parentEnd)
      return true
    }
    if (this.refusedCount++ < REJECTIONS_DESCRIBED)
      this.refused.push(resource, scope, index, traceStart, traceEnd, spanStart, spanEnd, parentStart, parentEnd)
    return false
  }

  /** values.ts's idFault without the words: present (or not required), `size` bytes, not all zero. */
  private idGood(start: number, end: number, size: number, required: boolean): boolean {
    if (start === end) return !required
    if (end - start !== size) return false
    const b = this.buf
    for (let i = start; i < end; i++) if (b[i] !== 0) return true
    return false
  }

  private status(end: number): void {
    while (this.pos < end) {
      const t = this.tag(end)
      if (t === ((2 << 3) | 2)) this.string(end)
      else this.skip(t & 7, end)
    }
  }

  /** The KeyValues of field `field` of a message (Resource.attributes, KeyValueList.values); whether a key matched. */
  private keyValues(end: number, field: number, depth: number): boolean {
    let matched = false
    while (this.pos < end) {
      const t = this.tag(end)
      if (t === ((field << 3) | 2)) {
        const n = this.length(end)
        if (this.keyValue(this.pos + n, depth)) matched = true
      } else this.skip(t & 7, end)
    }
    return matched
  }

  private keyValue(end: number, depth: number): boolean {
    let matched = false
    while (this.pos < end) {
      const t = this.tag(end)
      // A key given twice: the last one is the key (protobufjs keeps the last value of a field).
      if (t === ((1 << 3) | 2)) matched = this.key(end)
      else if (t === ((2 << 3) | 2)) {
        const n = this.length(end)
        this.anyValue(this.pos + n, depth + 1)
      } else this.skip(t & 7, end)
    }
    return matched
  }

  private anyValue(end: number, depth: number): void {
    if (depth > MAX_DEPTH) throw UNSURE
    while (this.pos < end) {
      const t = this.tag(end)
      switch (t) {
        case (1 << 3) | 2:
          this.string(end)
          break
        case (5 << 3) | 2: {
          // ArrayValue: repeated AnyValue values = 1
          const n = this.length(end)
          const stop = this.pos + n
          while (this.pos < stop) {
            const u = this.tag(stop)
            if (u === ((1 << 3) | 2)) {
              const m = this.length(stop)
              this.anyValue(this.pos + m, depth + 1)
            } else this.skip(u & 7, stop)
          }
          break
        }
        case (6 << 3) | 2: {
          // KeyValueList: repeated KeyValue values = 1 (their keys are not classified: only top-level keys are)
          const n = this.length(end)
          this.keyValues(this.pos + n, 1, depth + 1)
          break
        }
        default:
          // bool (2), int (3), double (4), bytes (7): nothing to check beyond their wire format.
          this.skip(t & 7, end)
      }
    }
  }
}

/**
 * Scans an ExportTraceServiceRequest; undefined when the scan cannot vouch for it (the caller
 * then decodes it whole with protobufjs). `prefixes` are UTF-8 encoded attribute key prefixes.
 */
export function scanTraces(buf: Uint8Array, prefixes: readonly Uint8Array[]): ScannedTraces | undefined {
  const s = new Scanner(Buffer.isBuffer(buf) ? buf : Buffer.from(buf.buffer, buf.byteOffset, buf.length), prefixes)
  try {
    s.request(buf.length)
  } catch {
    return undefined
  }
  return { resources: s.resources, spans: s.spans, refusedCount: s.refusedCount, refused: s.refused }
}
