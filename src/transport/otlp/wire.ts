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

/** The bytes are not what the reader reads (see above); the message says what and where. */
export class WireError extends Error {}

/** A protobuf reader over `buf`, at `pos`; each read is bounded by the `end` it is given. */
export class WireReader {
  constructor(
    readonly buf: Buffer,
    public pos = 0,
  ) {}

  /** A tag or a length: a varint of at most four bytes (below 2^28). */
  varint32(end: number): number {
    const b = this.buf
    let p = this.pos
    if (p >= end) throw this.error('a varint is cut off', p)
    let c = b[p++]
    if (c < 128) {
      this.pos = p
      return c
    }
    let v = c & 127
    for (let shift = 7; shift < 28; shift += 7) {
      if (p >= end) throw this.error('a varint is cut off', this.pos)
      c = b[p++]
      v |= (c & 127) << shift
      if (c < 128) {
        this.pos = p
        return v
      }
    }
    throw this.error('a tag or length of five bytes or more', this.pos)
  }

  /** A tag, as `field << 3 | wireType`; never field 0. */
  tag(end: number): number {
    const at = this.pos
    const t = this.varint32(end)
    if (t >>> 3 === 0) throw this.error('field number 0', at)
    return t
  }

  /** The length of a length-delimited field, whose bytes must end within `end`; the position is then at them. */
  length(end: number): number {
    const n = this.varint32(end)
    if (this.pos + n > end) throw this.error(`a length of ${n} runs past the end of its message (byte ${end})`, this.pos)
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
    if (p + 4 > end) throw this.error('a fixed-size value is cut off', p)
    this.pos = p + 4
    return this.buf.readUInt32LE(p)
  }

  double(end: number): number {
    const p = this.pos
    if (p + 8 > end) throw this.error('a fixed-size value is cut off', p)
    this.pos = p + 8
    return this.buf.readDoubleLE(p)
  }

  /** Passes a varint of up to ten bytes (any 64-bit value). */
  skipVarint(end: number): void {
    const b = this.buf
    let p = this.pos
    for (let i = 0; i < 10; i++) {
      if (p >= end) throw this.error('a varint is cut off', this.pos)
      if (b[p++] < 128) {
        this.pos = p
        return
      }
    }
    throw this.error('a varint of more than ten bytes', this.pos)
  }

  /** Passes a field's value of wire type `wireType`: an unknown field, or a known one of another wire type (as protobufjs skips both). */
  skip(wireType: number, end: number): void {
    switch (wireType) {
      case 0:
        return this.skipVarint(end)
      case 1:
        return this.skipBytes(8, end)
      case 2: {
        const n = this.length(end)
        this.pos += n
        return
      }
      case 5:
        return this.skipBytes(4, end)
    }
    throw this.error(`wire type ${wireType} (${wireType === 3 || wireType === 4 ? 'a group' : 'no such wire type'})`, this.pos)
  }

  private skipBytes(n: number, end: number): void {
    if (this.pos + n > end) throw this.error('a fixed-size value is cut off', this.pos)
    this.pos += n
  }

  private error(what: string, at: number): WireError {
    return new WireError(`${what} at byte ${at}`)
  }
}
