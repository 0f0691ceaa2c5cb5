import { createHash } from 'node:crypto'
import fc from 'fast-check'
import t from 'tap'
import type { CreateSettings } from '../../src/host/component.js'
import type { Batch } from '../../src/core/consumer.js'
import { AttributesProcessor, firstCodePoints } from '../../src/processors/attributes/index.js'
import { EMPTY_ATTRIBUTION, type UsageRecord } from '../../src/model/usage-record.js'

/** Runs the attributes processor with `actions` over `items`; resolves to what it handed on. */
async function apply(actions: unknown[], items: unknown[], signal: 'usage' | 'traces' | 'logs' = 'usage'): Promise<unknown[]> {
  let out: unknown[] = []
  const settings = { metrics: { accepted: () => undefined } } as unknown as CreateSettings
  const p = new AttributesProcessor(settings, { actions } as never, signal, { consume: async (b: Batch<unknown>) => void (out = b.items) })
  await p.consume({ items, ctx: {} } as Batch<unknown>)
  return out
}

/** A completion record as the pipeline holds it after validate and attribution, its body as JSON.parse makes it. */
function record(body: Record<string, unknown>): UsageRecord {
  return {
    id: 'r1',
    kind: 'completion',
    eventTime: '2026-11-21T00:00:00.000Z',
    receivedAt: '2026-11-21T00:00:01.000Z',
    caller: { account: 'acct', tenant: 'ten', team: 'team-a', environment: 'prod', keyId: 'k' },
    attribution: { ...EMPTY_ATTRIBUTION, subscriberEmail: 'ana@x.io', traceId: String(body.traceId ?? '') },
    attributed: true,
    body: JSON.parse(JSON.stringify(body)),
  } as UsageRecord
}

t.test('truncate cuts by code points: never half a surrogate pair, a lone surrogate counts as one', async (t) => {
  const cut = async (traceId: string, length: number) => ((await apply([{ key: 'traceId', action: 'truncate', length }], [record({ model: 'm', traceId })]))[0] as UsageRecord).body.traceId
  t.equal(await cut('a😀b', 2), 'a😀', 'the pair is kept whole')
  t.equal(await cut('a😀b', 1), 'a')
  t.equal(await cut('\ud800xyz', 2), '\ud800x', 'a lone high surrogate is one code point')
  t.equal(await cut('😀😀😀', 2), '😀😀', 'six code units, three code points: two kept')
  t.equal(await cut('trace-1', 4), 'trac')
  t.equal(await cut('abc', 0), '')

  // Against Array.from, which iterates by code points, on strings of every kind of code unit.
  const unit = fc.oneof(fc.constantFrom(0xd800, 0xdbff, 0xdc00, 0xdfff, 0x41, 0xe9), fc.integer({ min: 0, max: 0xffff }))
  const text = fc.array(unit, { maxLength: 12 }).map((u) => String.fromCharCode(...u))
  fc.assert(
    fc.property(text, fc.integer({ min: 0, max: 14 }), (s, n) => {
      const want = Array.from(s).slice(0, n).join('')
      if (firstCodePoints(s, n) !== want) throw new Error(`${JSON.stringify(s)} to ${n}: ${JSON.stringify(firstCodePoints(s, n))}, wanted ${JSON.stringify(want)}`)
    }),
    { numRuns: 5000, seed: 20261125 },
  )
})

t.test('the five actions of the routing benchmark change the body and the normalised dimensions as documented', async (t) => {
  const body = { model: 'gpt-4o-mini', inputMessages: '[{"role":"user"}]', traceId: 'trace-1', subscriber: { id: 'u-1', email: 'Ana@x.io' }, retryNumber: 0 }
  const [r] = (await apply(
    [
      { key: 'inputMessages', action: 'delete' },
      { key: 'subscriber.email', action: 'hash' },
      { key: 'region', value: 'eu-west-1', action: 'insert' },
      { key: 'traceId', action: 'truncate', length: 4 },
      { key: 'attributes.routed', value: true, action: 'set' },
    ],
    [record(body)],
  )) as UsageRecord[]
  // SHA-256 of the normalised (lower-case) e-mail, in lowercase hex.
  const want = createHash('sha256').update('ana@x.io').digest('hex')
  t.same(r.body, { model: 'gpt-4o-mini', traceId: 'trac', subscriber: { id: 'u-1', email: want }, retryNumber: 0, region: 'eu-west-1', attributes: { routed: true } })
  t.same(Object.keys(r.body), ['model', 'traceId', 'subscriber', 'retryNumber', 'region', 'attributes'], 'the other fields keep their order; new ones come last')
  t.equal(r.attribution.region, 'eu-west-1')
  t.equal(r.attribution.traceId, 'trac')
  t.equal(r.attribution.subscriberEmail, want)
  // A key added where an object holds many fields (a copy without a deleted one) is a plain, enumerable, writable field.
  const d = Object.getOwnPropertyDescriptor(r.body, 'region')!
  t.same({ enumerable: d.enumerable, writable: d.writable, configurable: d.configurable }, { enumerable: true, writable: true, configurable: true })
})

t.test('set and insert add a missing key; update leaves an absent one absent; delete of a middle key keeps the rest in order', async (t) => {
  const many = Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`f${i}`, i]))
  const [r] = (await apply(
    [
      { key: 'body.f10', action: 'delete' },
      { key: 'body.extra.a', value: 'x', action: 'set' },
      { key: 'body.f11', value: 'y', action: 'insert' },
      { key: 'body.missing', value: 'z', action: 'update' },
      { key: 'body.f12', value: 7, action: 'update' },
    ],
    [record({ model: 'm', ...many })],
  )) as UsageRecord[]
  const keys = Object.keys(r.body)
  t.notOk(keys.includes('f10'), 'deleted')
  t.same(keys.slice(-1), ['extra'], 'the new object comes last')
  t.equal(r.body.f11, 11, 'insert does not overwrite')
  t.notOk('missing' in r.body, 'update does not add')
  t.equal(r.body.f12, 7, 'update changes a present key')
  t.same(r.body.extra, { a: 'x' })
  t.same(keys.filter((k) => k.startsWith('f')), Object.keys(many).filter((k) => k !== 'f10'), 'the order of the others is kept')
})

t.test('delete removes the last field, a middle one and a nested one alike', async (t) => {
  const body = { model: 'm', subscriber: { id: 'u-1', email: 'a@x.io' }, systemPrompt: 'be brief', outputResponse: 'ok', inputMessages: '[]' }
  const [r] = (await apply(
    [
      { key: 'inputMessages', action: 'delete' }, // the newest field
      { key: 'systemPrompt', action: 'delete' }, // one in the middle
      { key: 'subscriber.email', action: 'delete' }, // the newest of a nested object
      { key: 'outputResponse', action: 'delete' }, // newest again, after the copy
    ],
    [record(body)],
  )) as UsageRecord[]
  t.same(r.body, { model: 'm', subscriber: { id: 'u-1' } })
  t.same(Object.keys(r.body), ['model', 'subscriber'])
  t.equal(r.attribution.subscriberEmail, '', 'the normalised dimension goes with it')
})
