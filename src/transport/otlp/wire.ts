/*
 * The protobuf wire format, where meterd reads OTLP bytes by hand rather than through protobufjs
 * (scan-traces.ts walks a whole trace export, read-span.ts reads a span from it). One reader, so
 * the bounds are checked in one place: every read is given the end of the message it is in, and
 * nothing — a varint, a length, a fixed-size value, a skipped field — is read past that end.
 *
 * It reads what those callers follow and throws a WireError for anything else: a truncated
 * value, a length past its message's end, a tag or length of five bytes or more (below 2^28 is
 * what OTLP needs), a varint of more than ten bytes, field number 0, and wire types 3 and 4
 * (groups) and 6 and 7 (none). The callers then give up and protobufjs decodes the request,
 * whose refusal of a malformed body is the 400 `malformed_protobuf` (decode-proto.ts): a WireError
 * is never shown to a client. Every loop over a message reads at least a tag a turn, so hostile
 * bytes end the reading; they never make it spin.
 *
 * A class with a position and small methods, which V8 inlines into the callers' loops: a
 * function per value, or closures, cost instructions per field on the hot path.
 */

/** The bytes are not what the reader reads (see above); the message says what. */
export class WireError extends Error {}

// One error of each kind, made once: each throw site stays a few bytes of bytecode. V8 inlines
// by bytecode size, within a budget per function; a larger skip() (one more expression) was
// enough to change which of the scan's methods were inlined, at a cost in instructions.
const CUT_OFF = new WireError('a value is cut off by the end of its message')
const PAST_END = new WireError('a length runs past the end of its message')
const FIVE_BYTES = new WireError('a tag or length of five bytes or more')
const ELEVEN_BYTES = new WireError('a varint of more than ten bytes')
const FIELD_ZERO = new WireError('field number 0')
const NOT_SKIPPED = new WireError('wire type 3 or 4 (a group), 6 or 7 (none): not skipped')

/** A protobuf reader over `buf`, at `pos`; each read is bounded by the `end` it is given. */
export class WireReader {
  // Defined as a number from the start: a field first undefined (as a constructor parameter
  // property is, under ES2022 class fields) is kept as any value, and every read of the position
  // then checks what it holds (about 60,000 more instructions per scan of the benches' 100-span export).
  pos = 0

  constructor(
    readonly buf: Buffer,
    start = 0,
  ) {
    this.pos = start
  }

  /** A tag or a length: a varint of at most four bytes (below 2^28). */
  varint32(end: number): number {
    const b = this.buf
    let p = this.pos
    if (p >= end) throw CUT_OFF
    let c = b[p++]
    if (c < 128) {
      this.pos = p
      return c
    }
    let v = c & 127
    if (p >= end) throw CUT_OFF
    c = b[p++]
    v |= (c & 127) << 7
    if (c >= 128) {
      if (p >= end) throw CUT_OFF
      c = b[p++]
      v |= (c & 127) << 14
      if (c >= 128) {
        if (p >= end) throw CUT_OFF
        c = b[p++]
        if (c >= 128) throw FIVE_BYTES
        v |= c << 21
      }
    }
    this.pos = p
    return v
  }

  /** A tag, as `field << 3 | wireType`; never field 0. */
  tag(end: number): number {
    // One byte, the common case, inline; the rest in a call, so that tag() stays small enough for
    // V8 to inline into every loop (it inlines by bytecode size, within a budget per function).
    const p = this.pos
    if (p < end) {
      const t = this.buf[p]
      if (t < 128 && t >= 8) {
        this.pos = p + 1
        return t
      }
    }
    return this.longTag(end)
  }

  private longTag(end: number): number {
    const t = this.varint32(end)
    if (t >>> 3 === 0) throw FIELD_ZERO
    return t
  }

  /** The length of a length-delimited field, whose bytes must end within `end`; the position is then at them. */
  length(end: number): number {
    const p = this.pos
    if (p < end) {
      const n = this.buf[p]
      if (n < 128 && p + 1 + n <= end) {
        this.pos = p + 1
        return n
      }
    }
    return this.longLength(end)
  }

  private longLength(end: number): number {
    const n = this.varint32(end)
    if (this.pos + n > end) throw PAST_END
    return n
  }

  /** A length-delimited field's bytes as UTF-8, replacing what is not (the callers have checked it). */
  text(end: number): string {
    const n = this.length(end)
    const start = this.pos
    this.pos = start + n
    return n === 0 ? '' : this.buf.toString('utf8', start, start + n)
  }

  /** Four little-endian bytes, unsigned (a fixed32, or half of a fixed64). */
  fixed32(end: number): number {
    const p = this.pos
    if (p + 4 > end) throw CUT_OFF
    this.pos = p + 4
    return this.buf.readUInt32LE(p)
  }

  double(end: number): number {
    const p = this.pos
    if (p + 8 > end) throw CUT_OFF
    this.pos = p + 8
    return this.buf.readDoubleLE(p)
  }

  /** Passes a varint of up to ten bytes (any 64-bit value). */
  skipVarint(end: number): void {
    const b = this.buf
    let p = this.pos
    for (let i = 0; i < 10; i++) {
      if (p >= end) throw CUT_OFF
      if (b[p++] < 128) {
        this.pos = p
        return
      }
    }
    throw ELEVEN_BYTES
  }

  /** Passes a field's value of wire type `wireType`: an unknown field, or a known one of another wire type (as protobufjs skips both). */
  skip(wireType: number, end: number): void {
    switch (wireType) {
      case 0:
        return this.skipVarint(end)
      case 1:
        if (this.pos + 8 > end) throw CUT_OFF
        this.pos += 8
        return
      case 2: {
        const n = this.length(end)
        this.pos += n
        return
      }
      case 5:
        if (this.pos + 4 > end) throw CUT_OFF
        this.pos += 4
        return
    }
    throw NOT_SKIPPED
  }
}
