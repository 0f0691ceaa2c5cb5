/**
 * The rows one worker sends the others (src/domain/analytics/row.ts, issue 19 §1): what a
 * worker adds for another worker's record must be exactly what that worker read from it, or
 * the two answer the same query differently. A batch crosses a socket as bytes and is read from
 * wherever it lands in the receiver's buffer (not on an 8-byte boundary, say), as here.
 */
import fc from 'fast-check'
import t from 'tap'
import { TOKENS } from '../../src/domain/analytics/block.js'
import { DIMENSIONS } from '../../src/domain/analytics/dimensions.js'
import { PeerRows, readPeerRows, RowInput } from '../../src/domain/analytics/row.js'

interface Sent {
  id: string
  team: string
  unpriced: boolean
  time: number
  cost: number | bigint
  flags: number
  duration: number
  ttft: number
  tokens: number[]
  dims: string[]
  traceId: string
}

// A few values repeat (as a client's do), the rest are anything, quotes and backslashes included.
const text = fc.oneof(fc.constantFrom('', 'AcmeOrg', 'gpt-4o-mini', 'openai', 'say "hi"\\'), fc.string(), fc.string({ unit: 'grapheme' }))
const ms = fc.oneof(fc.constant(NaN), fc.integer({ min: 0, max: 10_000_000 }), fc.double({ min: 0, max: 1e6, noNaN: true }))
const sent: fc.Arbitrary<Sent> = fc.record({
  id: fc.string({ unit: fc.constantFrom(...'0123456789ABCDEFGHJKMNPQRSTVWXYZ'), minLength: 26, maxLength: 26 }),
  team: text,
  unpriced: fc.boolean(),
  time: fc.integer({ min: 0, max: 4_102_444_800_000 }),
  // Below 2^52 units a cost is a double, from there a bigint (units.ts).
  cost: fc.oneof(fc.integer({ min: 0, max: 2 ** 52 - 1 }), fc.bigInt({ min: 2n ** 52n, max: 10n ** 30n })),
  flags: fc.integer({ min: 0, max: 3 }),
  duration: ms,
  ttft: ms,
  tokens: fc.array(fc.oneof(fc.nat(), fc.double({ min: 0, max: 1e12, noNaN: true })), { minLength: TOKENS, maxLength: TOKENS }),
  dims: fc.array(text, { minLength: DIMENSIONS.length, maxLength: DIMENSIONS.length }),
  traceId: text,
})

function toRow(s: Sent, row: RowInput): RowInput {
  row.time = s.time
  row.cost = s.cost
  row.flags = s.flags
  row.duration = s.duration
  row.ttft = s.ttft
  for (let k = 0; k < TOKENS; k++) row.tokens[k] = s.tokens[k]
  for (let k = 0; k < DIMENSIONS.length; k++) row.dims[k] = s.dims[k]
  row.traceId = s.traceId
  return row
}

/** What the receiver reads, batch by batch, each batch read at an odd offset of a larger buffer. */
function roundTrip(batches: Sent[][]): Sent[] {
  const out = new PeerRows()
  const scratch = new RowInput()
  const got: Sent[] = []
  for (const batch of batches) {
    for (const s of batch) out.push(s.id, s.team, s.unpriced, toRow(s, scratch))
    if (batch.length === 0) continue
    const bytes = out.take()
    if (!out.empty) throw new Error('a batch taken must leave the next one empty')
    const landed = Buffer.concat([Buffer.from('abc'), bytes, Buffer.from('de')]).subarray(3, 3 + bytes.length)
    const row = new RowInput()
    readPeerRows(landed, row, (id, team, unpriced) => {
      got.push({ id, team, unpriced, time: row.time, cost: row.cost, flags: row.flags, duration: row.duration, ttft: row.ttft, tokens: [...row.tokens], dims: [...row.dims], traceId: row.traceId })
    })
  }
  return got
}

t.test('every value of every row arrives as it was sent, batch after batch', async (t) => {
  fc.assert(
    fc.property(fc.array(fc.array(sent, { maxLength: 12 }), { maxLength: 5 }), (batches) => {
      const got = roundTrip(batches)
      const want = batches.flat()
      if (got.length !== want.length) return false
      for (let i = 0; i < want.length; i++) {
        // NaN (unknown) stays NaN; a bigint cost stays a bigint of the same value.
        if (!Object.is(got[i].duration, want[i].duration) || !Object.is(got[i].ttft, want[i].ttft)) return false
        if (typeof got[i].cost !== typeof want[i].cost || got[i].cost !== want[i].cost) return false
        const { duration: _a, ttft: _b, cost: _c, ...g } = got[i]
        const { duration: _d, ttft: _e, cost: _f, ...w } = want[i]
        if (JSON.stringify(g) !== JSON.stringify(w)) return false
      }
      return true
    }),
    { numRuns: 300 },
  )
})

t.test('a batch names each distinct string once', async (t) => {
  const out = new PeerRows()
  const row = new RowInput()
  const s: Sent = { id: '01M89Z0NGZCZMEK3WNB7BSKT7G', team: 'default', unpriced: false, time: 1, cost: 5, flags: 0, duration: 3, ttft: NaN, tokens: new Array(TOKENS).fill(1), dims: DIMENSIONS.map(() => 'AcmeOrg'), traceId: 'trace-1' }
  const ids = Array.from({ length: 100 }, (_, i) => `${s.id.slice(0, 24)}${String(i).padStart(2, '0')}`)
  for (const id of ids) out.push(id, s.team, s.unpriced, toRow(s, row))
  const bytes = out.take()
  const table = bytes.readUInt32LE(4)
  const strings = JSON.parse(bytes.subarray(bytes.length - table).toString()) as string[]
  t.same(strings.sort(), [...ids, 'default', 'AcmeOrg', 'trace-1'].sort())
})

t.test('a batch cut short is refused, not read past its end', async (t) => {
  const out = new PeerRows()
  const row = new RowInput()
  out.push('01M89Z0NGZCZMEK3WNB7BSKT7G', 'default', false, row)
  const bytes = out.take()
  t.throws(() => readPeerRows(bytes.subarray(0, bytes.length - 1), row, () => undefined), /cannot be/)
})
