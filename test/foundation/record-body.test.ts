/**
 * A record's body is stored in meterd's own encoding (src/store/record-codec.ts, format 2) when
 * it is JSON-shaped, and in msgpack as before (format 1) when it holds anything else: either
 * way it reads back as it was put — key order, nesting, every number, every string (non-ASCII,
 * lone surrogates), odd keys such as `__proto__` — and records of format 1 still read.
 */
import { join } from 'node:path'
import { asBinary } from 'lmdb'
import t from 'tap'
import type { UsageRecord } from '../../src/model/usage-record.js'
import { BODY_KEYS } from '../../src/store/body-keys.js'
import { bodyShapes } from '../../src/store/record-codec.js'
import { Store } from '../../src/store/store.js'
import { removeDir, tempDir } from '../helpers/meterd.js'
import { usageRecord } from '../helpers/usage-record.js'

const record = (id: string, body: Record<string, unknown>, over: Partial<UsageRecord> = {}): UsageRecord => usageRecord(id, { body: body as UsageRecord['body'], ...over })

/** The LiteLLM completion of the benches (test/bench/lib.js). */
const LITELLM = {
  stopReason: 'TOKEN_LIMIT', costType: 'AI', isStreamed: false, operationType: 'CHAT',
  inputTokenCount: 12, outputTokenCount: 5, reasoningTokenCount: 0, cacheCreationTokenCount: 0,
  cacheReadTokenCount: 0, totalTokenCount: 17, model: 'gpt-4o-mini', modelSource: 'OPENAI',
  transactionId: 'tx-1', responseTime: '2026-11-21T23:55:47.678Z',
  requestDuration: 17, provider: 'OpenAI', requestTime: '2026-11-21T23:55:47.661Z',
  completionStartTime: '2026-11-21T23:55:47.678Z', timeToFirstToken: 17, middlewareSource: 'nodejs',
  traceId: 'trace-1', taskType: 'chat', agent: 'agent-a', organizationName: 'AcmeOrg', productName: 'Gold',
  subscriber: { id: 'u-1', email: 'u1@example.com', credential: { name: 'key', value: 'cred-1' } },
  retryNumber: 0, region: 'local-test',
}

/**
 * Whether `got` is `want` exactly: the same types, numbers by Object.is (-0, NaN), own keys in
 * the same order, plain objects with Object.prototype, arrays as arrays.
 */
function exact(got: unknown, want: unknown, path = 'body'): string | undefined {
  if (typeof want !== 'object' || want === null) return Object.is(got, want) ? undefined : `${path}: ${String(got)} is not ${String(want)}`
  if (typeof got !== 'object' || got === null) return `${path}: ${String(got)} is not an object`
  if (Array.isArray(want) !== Array.isArray(got)) return `${path}: array or not`
  if (!Array.isArray(got) && Object.getPrototypeOf(got) !== Object.prototype) return `${path}: not a plain object`
  const gk = Reflect.ownKeys(got)
  const wk = Reflect.ownKeys(want)
  if (gk.join('\u0000') !== wk.join('\u0000')) return `${path}: keys ${JSON.stringify(gk)} are not ${JSON.stringify(wk)}`
  for (const k of wk) {
    if (typeof k !== 'string' || (k === 'length' && Array.isArray(want))) continue
    const g = Object.getOwnPropertyDescriptor(got, k)
    const w = Object.getOwnPropertyDescriptor(want, k)
    if (!g || !g.enumerable || !('value' in g)) return `${path}.${k}: not an own enumerable value`
    const problem = exact(g.value, w?.value, `${path}.${k}`)
    if (problem) return problem
  }
  return undefined
}

/** JSON-shaped bodies the own encoding holds, each with what it exercises. */
const HELD: [string, Record<string, unknown>][] = [
  ['the bench completion', LITELLM],
  ['an empty body', {}],
  ['every number form', {
    zero: 0, negZero: -0, small: 63, byte: 64, i31: 2 ** 31 - 1, i31up: 2 ** 31, i32: 2 ** 32, big: 2 ** 53 - 1, bigger: 2 ** 60,
    neg: -1, negSmall: -64, negI31: -(2 ** 31), negBeyond: -(2 ** 31) - 1, negBig: -(2 ** 53) + 1, ms: 1_764_000_000_123,
    frac: 0.1, tiny: Number.MIN_VALUE, huge: 1e300, max: Number.MAX_VALUE, nan: NaN, inf: Infinity, ninf: -Infinity, score: 0.75,
  }],
  ['strings of every length class', {
    empty: '', one: 'a', s127: 'x'.repeat(127), s128: 'y'.repeat(128), s300: 'z'.repeat(300), s20k: 'w'.repeat(20_000),
    model: 'gpt-4o-mini', inputMessages: JSON.stringify([{ role: 'user', content: 'hello "there"\n' }]),
  }],
  ['non-ASCII text, in values and keys', {
    organizationName: 'Zürich Café ☕ 😀', 'clé-é': 'ß', 'ключ': 'значение', '日本': '語', emoji: '👩‍👩‍👧', nul: 'a\u0000b', bom: '\ufeff',
  }],
  ['lone surrogates, in values and keys', { hi: 'a\ud800b', lo: '\udc00', end: 'x\ud83d', ['k\udfff']: 1, pair: '😀' }],
  ['odd keys', JSON.parse('{"__proto__": {"polluted": true}, "constructor": "c", "hasOwnProperty": 1, "toString": null, "": "empty key", "valueOf": [1]}')],
  ['integer-like keys (ordered first, as JavaScript orders them)', { b: 1, 2: 'two', a: 2, 1: 'one', '01': 'not an index', 4294967295: 'beyond an index' }],
  ['nesting, arrays and nulls', {
    subscriber: { id: null, email: undefined, credential: { name: 'key', value: null } },
    attributes: { response_format_type: 'json_schema', nested: { deeper: { deepest: [1, [2, [3, []]], {}] } } },
    empty: [], short: [1, 'two', true, false, null, undefined, 3.5], fifteen: Array.from({ length: 15 }, (_, i) => i), sixteen: Array.from({ length: 16 }, (_, i) => `s${i}`),
    objects: [{ a: 1 }, { a: 2, b: 3 }, { b: 4, a: 5 }],
  }],
  ['every known key', Object.fromEntries(BODY_KEYS.map((k, i) => [k, i % 3 === 0 ? `v${i}` : i % 3 === 1 ? i : { [k]: k }]))],
  ['keys the table does not know', { someCustomField: 'x', another_one: 2, 'with space': true, ['x'.repeat(200)]: 'long key' }],
  ['a structure longer than the first room (4,096 bytes) and a three-byte length', { many: Array.from({ length: 20_000 }, (_, i) => (i % 2 ? i * 1.5 : i)) }],
  ['64 levels deep', JSON.parse('{"a":'.repeat(63) + '[1]' + '}'.repeat(63))],
  ['an object without a prototype', Object.assign(Object.create(null), { model: 'm', nested: Object.assign(Object.create(null), { a: 1 }) })],
]

t.test('a JSON-shaped body is stored in the own encoding and reads back exactly', async (t) => {
  const dir = tempDir('meterd-record-body-')
  t.teardown(() => removeDir(dir))
  const path = join(dir, 'data')
  const store = new Store({ path })
  const written = HELD.map(([, body], i) => record(`01HELD${String(i).padStart(2, '0')}`, body))
  // One priced, and one whose meta strings hold a lone surrogate and non-ASCII text too.
  written.push(record('01PRICED', LITELLM, { cost: { currency: 'USD', total: '0.000004800000', parts: { input: '0.0000018', output: '0.000003' }, source: 'pricebook', priceVersion: 'v1' } }))
  written.push(record('01LONEMETA', { hi: '\ud800' }, { attribution: { ...written[0].attribution, agent: 'ágent\udbff', traceId: 't'.repeat(300) } }))
  await store.durable(store.root.transaction(() => written.forEach((r) => store.usage.records.put(r.id, r))))
  // And outside a transaction (lmdb-js keeps the bytes until its commit).
  const later = record('01LATER', LITELLM)
  await store.usage.records.put(later.id, later)
  written.push(later)

  const check = (s: Store, when: string) => {
    for (const [i, r] of written.entries()) {
      const name = HELD[i]?.[0] ?? r.id
      const bytes = s.usage.records.getBinary(r.id)!
      t.equal(bytes[0], 0xc1, `${name}: in the fixed layout`)
      t.equal(bytes[1], 2, `${name}: with the own body encoding`)
      const got = s.usage.get(r.id)!
      t.equal(exact(got.body, r.body), undefined, `${name}: the body reads back exactly ${when}`)
      t.same({ ...got, body: null }, { ...r, body: null }, `${name}: and the rest of the record`)
      t.same(Object.keys(got), Object.keys(r), `${name}: the record keeps its field order`)
    }
  }
  check(store, '')
  t.equal(store.usage.get('01LONEMETA')!.attribution.agent, 'ágent\udbff', 'a lone surrogate in a meta string is kept')
  const proto = store.usage.get(written[6].id)!.body
  t.equal(Object.getPrototypeOf(proto), Object.prototype, '`__proto__` does not become the prototype')
  t.equal((Object.prototype as Record<string, unknown>).polluted, undefined, 'nor touches Object.prototype')
  t.same(Object.getOwnPropertyDescriptor(proto, '__proto__')?.value, { polluted: true }, 'it is an own property, as JSON.parse makes it')
  t.same([...store.usage.records.getRange({})].length, written.length, 'a range read decodes them all')
  await store.close()

  const again = new Store({ path })
  check(again, 'after the store is opened again')
  await again.close()
})

t.test('bodies of other shapes one after the other read back right (the walk remembers keys by place)', async (t) => {
  const dir = tempDir('meterd-record-body-seq-')
  t.teardown(() => removeDir(dir))
  const store = new Store({ path: join(dir, 'data') })
  const shapes = [
    LITELLM,
    { ...LITELLM, model: undefined, extra: 1 },
    { stopReason: 'END', unknownKey: 'x', model: 'm' },
    { unknownKey: 'y', stopReason: 'END' },
    { model: { model: { model: 'deep' } } },
    LITELLM,
  ]
  const written = shapes.map((body, i) => record(`01SEQ${i}`, body as Record<string, unknown>))
  await store.durable(store.root.transaction(() => written.forEach((r) => store.usage.records.put(r.id, r))))
  for (const r of written) t.equal(exact(store.usage.get(r.id)!.body, r.body), undefined, `${r.id} reads back exactly`)
  await store.close()
})

t.test('a body the own encoding does not hold is stored in msgpack, as before', async (t) => {
  const dir = tempDir('meterd-record-body-msgpack-')
  t.teardown(() => removeDir(dir))
  const store = new Store({ path: join(dir, 'data') })
  class Point {
    constructor(readonly x: number) {}
  }
  const bodies: [string, Record<string, unknown>, (got: Record<string, unknown>) => boolean][] = [
    ['a Date', { ...LITELLM, at: new Date(1_764_000_000_123) }, (b) => b.at instanceof Date && (b.at as Date).getTime() === 1_764_000_000_123],
    ['a Map', { m: new Map([['a', 1]]) }, (b) => b.m instanceof Map && (b.m as Map<string, number>).get('a') === 1],
    ['a typed array', { u: new Uint8Array([1, 2, 3]) }, (b) => b.u instanceof Uint8Array && [...(b.u as Uint8Array)].join() === '1,2,3'],
    ['a bigint', { n: 2n ** 60n }, (b) => b.n === 2n ** 60n],
    ['a class instance', { p: new Point(3) }, (b) => (b.p as { x: number }).x === 3],
    ['nesting deeper than 64', JSON.parse('{"a":'.repeat(70) + '1' + '}'.repeat(70)), (b) => JSON.stringify(b) === '{"a":'.repeat(70) + '1' + '}'.repeat(70)],
  ]
  const written = bodies.map(([, body], i) => record(`01MSGPACK${i}`, body, i === 0 ? { cost: { currency: 'USD', total: '1', parts: { input: '1' }, source: 'client' } } : {}))
  await store.durable(store.root.transaction(() => written.forEach((r) => store.usage.records.put(r.id, r))))
  for (const [i, [name, , ok]] of bodies.entries()) {
    const bytes = store.usage.records.getBinary(written[i].id)!
    t.same([bytes[0], bytes[1]], [0xc1, 1], `${name}: format 1, the body in msgpack`)
    const got = store.usage.get(written[i].id)!
    t.ok(ok(got.body), `${name}: reads back as msgpack gives it`)
    t.same({ ...got, body: null }, { ...written[i], body: null }, `${name}: and the rest of the record`)
  }
  t.same(store.usage.get(written[0].id)!.body.subscriber, LITELLM.subscriber, 'the rest of such a body too')
  await store.close()
})

t.test('a record of format 1 written by an earlier build reads back', async (t) => {
  const dir = tempDir('meterd-record-body-format1-')
  t.teardown(() => removeDir(dir))
  const store = new Store({ path: join(dir, 'data') })
  // Format 1 as earlier builds wrote it: the meta strings' lengths, their UTF-8 bytes after a
  // five-byte length, the cost (length, msgpack), the body in msgpack to the end.
  const r = record('01FORMAT1', { ...LITELLM, note: 'Zürich' }, { cost: { currency: 'USD', total: '2', parts: {}, source: 'client' } })
  const c = r.caller
  const a = r.attribution
  const strings = [r.id, r.kind, r.eventTime, r.receivedAt, c.account, c.tenant, c.team, c.environment, c.keyId, a.organizationName, a.productName, a.subscriberId, a.subscriberEmail, a.subscriberCredentialName, a.agent, a.traceId, a.workflowId, a.taskType, a.subscriptionId, a.ticketId, a.environment, a.region]
  const leb = (n: number, min = 1) => {
    const out: number[] = []
    do {
      out.push((n & 0x7f) | 0x80)
      n >>>= 7
    } while (n > 0 || out.length < min)
    out[out.length - 1] &= 0x7f
    return out
  }
  const meta = Buffer.from(strings.join(''), 'utf8')
  // msgpack with the database's shared structures, as those builds wrote the parts (copied: the
  // encoder's next encode reuses its buffer).
  const msgpack = (v: unknown) => Buffer.from(store.usage.records.encoder!.encode(v) as Uint8Array)
  const cost = msgpack(r.cost)
  const body = msgpack(r.body)
  const bytes = Buffer.concat([
    Buffer.from([0xc1, 1, 1 | 2, ...strings.flatMap((s) => leb(s.length)), ...leb(meta.length, 5)]),
    meta,
    Buffer.from(leb(cost.length)),
    cost,
    body,
  ])
  await store.usage.records.put(r.id, asBinary(bytes) as unknown as UsageRecord)
  t.same(store.usage.records.getBinary(r.id), bytes, 'the bytes are stored as built')
  t.same(store.usage.get(r.id), r, 'and read back as the record')
  await store.close()
})

t.test('a data directory of usage layout 4 opens in layout 5, its records as before, new ones in format 2', async (t) => {
  const dir = tempDir('meterd-record-body-layout4-')
  t.teardown(() => removeDir(dir))
  const path = join(dir, 'data')
  const first = new Store({ path })
  // A record of format 1 (a body the own encoding does not hold is still written so), and the
  // layout number a build of layout 4 left.
  const old = record('01LAYOUT4', { ...LITELLM, at: new Date('2026-11-21T23:55:47.661Z') })
  await first.durable(first.root.transaction(() => first.usage.writeInTransaction([old], { dedupWindowMs: 3_600_000, now: 1_000 })))
  t.equal(first.usage.records.getBinary(old.id)![1], 1, 'the earlier record is in format 1')
  await first.durable(first.db('meta').put('usage.layout', 4))
  await first.close()

  const reopened = new Store({ path })
  t.teardown(() => reopened.close())
  t.equal(reopened.db('meta').get('usage.layout'), 5, 'the directory is now in layout 5, so a build of layout 4 refuses it')
  t.same(reopened.usage.get(old.id), old, 'the earlier record reads as before')
  const fresh = record('01LAYOUT5', { ...LITELLM, transactionId: 'tx-layout-5' })
  await reopened.durable(reopened.root.transaction(() => reopened.usage.writeInTransaction([fresh], { dedupWindowMs: 3_600_000, now: 2_000 })))
  t.equal(reopened.usage.records.getBinary(fresh.id)![1], 2, 'a new record is in format 2')
  t.same(reopened.usage.get(fresh.id), fresh)
})

// The decoder makes an object of a shape (its keys in order) it has met a few times with a reader
// compiled for that shape (record-codec.ts, "The shapes of the objects read so far"). These read
// each shape many times, so both ways of making it — a property at a time and compiled — are read
// back, and check each read exactly (key order included).

/** Reads each record `times` times, checking every read against what was put. */
function readsBack(t: Tap.Test, store: Store, written: UsageRecord[], times: number, names: string[]): void {
  for (let n = 0; n < times; n++) {
    for (const [i, r] of written.entries()) {
      const got = store.usage.get(r.id)!.body
      const problem = exact(got, r.body)
      const json = JSON.stringify(got) === JSON.stringify(r.body)
      // One assertion per body and read would be thousands: only failures are reported one by one.
      if (problem !== undefined || !json) t.fail(`${names[i]}, read ${n + 1}: ${problem ?? 'its JSON differs'}`)
    }
  }
  t.pass(`${written.length} bodies read back exactly ${times} times each`)
}

t.test('shapes read many times are made by readers compiled for them, and read back exactly', async (t) => {
  const dir = tempDir('meterd-record-body-shapes-')
  t.teardown(() => removeDir(dir))
  const store = new Store({ path: join(dir, 'data') })
  const reversed = Object.fromEntries(Object.entries(LITELLM).reverse())
  const bodies: [string, Record<string, unknown>][] = [
    ['the bench completion (nested subscriber and credential)', { ...LITELLM, transactionId: 'tx-shapes' }],
    ['the same keys in the opposite order', reversed],
    ['the completion without two fields', Object.fromEntries(Object.entries(LITELLM).filter(([k]) => k !== 'requestDuration' && k !== 'retryNumber'))],
    ['a prefix of another shape', { model: 'm' }],
    ['that shape and one key more', { model: 'm', provider: 'p' }],
    ['literal keys that need quoting', { model: 'm', 'with space': 1, 'quote"back\\slash': 2, 'line\u2028sep': 3, 'k\ud800': 4, '': 5, constructor: 'c', toString: 't', '12': 'index-like', 'a-b': null }],
    ['`__proto__` among other keys', JSON.parse('{"model": "m", "__proto__": {"polluted": true}, "after": [1, {"__proto__": 2}]}')],
    ['nested shapes of their own', {
      subscriber: { id: 'u', email: 'e', credential: { name: 'n', value: 'v' } },
      attributes: { a: { b: { c: 1 } }, list: [{ a: 1 }, { a: 2, b: 3 }, { b: 4, a: 5 }, { a: 6 }] },
      empty: {},
    }],
    ['undefined and null values', { model: undefined, provider: null, agent: 'a' }],
  ]
  const written = bodies.map(([, body], i) => record(`01SHAPE${String(i).padStart(2, '0')}`, body))
  await store.durable(store.root.transaction(() => written.forEach((r) => store.usage.records.put(r.id, r))))
  readsBack(t, store, written, 12, bodies.map(([name]) => name))
  // Two shapes no other body has: compiled on their third read, not before (a one-off shape is not).
  const fresh = record('01SHAPEFRESH', { onlyHereA: 1, onlyHereB: { onlyHereC: 'x' } })
  await store.usage.records.put(fresh.id, fresh)
  const before = bodyShapes().compiled
  readsBack(t, store, [fresh], 2, ['a shape met twice'])
  t.equal(bodyShapes().compiled, before, 'a shape read twice is made a property at a time')
  readsBack(t, store, [fresh], 1, ['a shape met three times'])
  t.equal(bodyShapes().compiled, before + 2, 'on its third read, a reader is compiled for it and for its nested object')
  readsBack(t, store, [fresh], 5, ['a compiled shape'])
  t.equal(bodyShapes().compiled, before + 2, 'and used from then on')
  for (let n = 0; n < 5; n++) {
    const proto = store.usage.get(written[6].id)!.body as Record<string, unknown>
    t.equal(Object.getPrototypeOf(proto), Object.prototype, '`__proto__` does not become the prototype')
    t.same(Object.getOwnPropertyDescriptor(proto, '__proto__')?.value, { polluted: true }, 'it stays an own property')
    const inner = (proto.after as unknown[])[1] as object
    t.equal(Object.getPrototypeOf(inner), Object.prototype, 'a nested `__proto__` too')
    t.equal(Object.getOwnPropertyDescriptor(inner, '__proto__')?.value, 2)
  }
  t.equal((Object.prototype as Record<string, unknown>).polluted, undefined, 'Object.prototype is untouched')
  await store.close()
})

t.test('past the bounds of the shape tree, bodies read back as before and the tree stays bounded', async (t) => {
  const dir = tempDir('meterd-record-body-bounds-')
  t.teardown(() => removeDir(dir))
  const store = new Store({ path: join(dir, 'data') })
  const { maxNodes } = bodyShapes()
  const bodies: [string, Record<string, unknown>][] = [
    ['an object wider than a compiled shape may be', Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`wide${i}`, i]))],
    // Each item a shape of its own: more shapes than the tree holds.
    ['more distinct shapes than the tree holds', { items: Array.from({ length: maxNodes + 500 }, (_, i) => ({ [`key${i}`]: i, model: `m${i}` })) }],
    // Read after the tree is full: shapes whose path ends early (the rest added a property at a time).
    ['the completion and a key never met before', { ...LITELLM, neverMetBefore: 1, model: 'after' }],
    ['a known key the tree has no room for', { temperature: 0.5, ...LITELLM }],
    ['a literal key first', { neverMetFirst: true, model: 'm' }],
    ['`__proto__` past the bounds', JSON.parse('{"zzUnseen": 1, "__proto__": {"polluted": true}}')],
    ['the completion itself, compiled before the tree filled up', LITELLM],
  ]
  const written = bodies.map(([, body], i) => record(`01BOUND${String(i).padStart(2, '0')}`, body))
  await store.durable(store.root.transaction(() => written.forEach((r) => store.usage.records.put(r.id, r))))
  readsBack(t, store, written, 5, bodies.map(([name]) => name))
  const after = bodyShapes()
  t.equal(after.nodes, after.maxNodes, 'the tree filled up to its bound and no further')
  t.ok(after.compiled <= after.maxCompiled, 'and the compiled shapes stay within theirs')
  const proto = store.usage.get(written[5].id)!.body
  t.equal(Object.getPrototypeOf(proto), Object.prototype, '`__proto__` past the bounds is not the prototype either')
  t.same(Object.getOwnPropertyDescriptor(proto, '__proto__')?.value, { polluted: true })
  await store.close()
})
