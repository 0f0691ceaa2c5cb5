import { Type } from '@sinclair/typebox'
import t from 'tap'
import type { Component, ExporterFactory, ExtensionFactory, Factory, ProcessorFactory, ReceiverFactory, SignalConsumers } from '../../src/host/component.js'
import type { Batch, Consumer } from '../../src/core/consumer.js'
import { FanoutError, PermanentError, RetryableError, ThrottledError, toApiError } from '../../src/core/errors.js'
import { fanout, takeOnce } from '../../src/host/fanout.js'
import { Copies } from '../../src/core/copies.js'
import { factoryMap, plan } from '../../src/host/graph.js'
import { ConfigSchema, checkAgainst } from '../../src/core/config/schema.js'
import { Service } from '../../src/host/service.js'
import { createTelemetry } from '../../src/core/telemetry.js'
import { Writable } from 'node:stream'
import { removeDir, tempDir } from '../helpers/meterd.js'

const sink = (log: string[]): Consumer<any> => ({ consume: async (b: Batch<any>) => void log.push(...b.items.map(String)) })
const failing = (err: Error): Consumer<any> => ({ consume: async () => Promise.reject(err) })

t.test('fan-out reports every branch outcome and maps to one HTTP answer', async (t) => {
  const a: string[] = []
  const c: string[] = []
  const f = fanout([
    { id: 'a', consumer: sink(a), mutatesData: false },
    { id: 'b', consumer: failing(new RetryableError('b is down')), mutatesData: false },
    { id: 'c', consumer: sink(c), mutatesData: false },
  ])
  const err = await f.consume({ items: ['x'], ctx: {} }).catch((e) => e)
  t.type(err, FanoutError)
  t.same(err.outcomes.map((o: any) => [o.id, o.error?.message]), [['a', undefined], ['b', 'b is down'], ['c', undefined]], 'per-branch outcomes')
  t.same([a, c], [['x'], ['x']], 'the healthy branches got the data')
  const api = toApiError(err)
  t.equal(api.status, 503, 'a retryable branch failure is a 503: nothing is acknowledged')
  t.equal(api.headers['retry-after'], '1')

  const permanent = await fanout([
    { id: 'a', consumer: failing(new PermanentError('bad field', 'invalid_field', 'model')), mutatesData: false },
    { id: 'b', consumer: failing(new ThrottledError('slow down', 4500)), mutatesData: false },
  ]).consume({ items: ['x'], ctx: {} }).catch((e) => e)
  t.equal(toApiError(permanent).status, 400, 'a permanent failure wins: the data itself is bad')
  t.equal(toApiError(permanent).param, 'model')
  const throttled = toApiError(new ThrottledError('slow down', 4500))
  t.equal(throttled.status, 503)
  t.equal(throttled.headers['retry-after'], '5', 'Retry-After rounds the delay up to whole seconds')
  t.equal(toApiError(new Error('surprise')).status, 503, 'an unexpected error never claims the data was stored')
})

t.test('a mutating branch gets its own copy of the batch', async (t) => {
  const seen: unknown[] = []
  const mutate: Consumer<any> = { consume: async (b) => void (b.items[0].touched = true) }
  const look: Consumer<any> = { consume: async (b) => void seen.push(structuredClone(b.items[0])) }
  const original = { touched: false }
  await fanout([
    { id: 'm', consumer: mutate, mutatesData: true },
    { id: 'l', consumer: look, mutatesData: false },
  ]).consume({ items: [original], ctx: {} })
  t.same(seen, [{ touched: false }], 'the other branch never sees the mutation')
})

t.test('a consumer two pipelines share takes each item once; a batch without copies goes on as it is', async (t) => {
  const got: unknown[] = []
  const shared: Consumer<any> = { consume: async (b) => void got.push(...b.items) }
  // Two pipelines, each a mutating branch of the receiver's fan-out, both ending in `shared`.
  const a = { n: 1 }
  const b = { n: 2 }
  await fanout([
    { id: 'usage/a', consumer: takeOnce(shared), mutatesData: true },
    { id: 'usage/b', consumer: takeOnce(shared), mutatesData: true },
  ]).consume({ items: [a, b], ctx: {} })
  t.same(got, [{ n: 1 }, { n: 2 }], 'two items taken, not four')

  const passed: Batch<any>[] = []
  const batch = { items: [a], ctx: {} }
  await takeOnce({ consume: async (x) => void passed.push(x) }).consume(batch)
  t.equal(passed[0], batch, 'no copies: the very batch, not a part of it')

  // An item refused by the shared consumer is reported by its index in the batch it came in.
  const copies = new Copies()
  const c = { n: 3 }
  const d = { n: 4 }
  const c2 = structuredClone(c)
  copies.add(c, c2)
  const seen: number[][] = []
  const refusing: Consumer<any> = {
    consume: async (x) => {
      seen.push(x.items.map((item: { n: number }) => item.n))
      const i = x.items.findIndex((item: { n: number }) => item.n === 4)
      if (i >= 0) x.ctx.rejected = [{ index: i, message: 'no' }]
    },
  }
  const first = { items: [c], ctx: { copies } as Batch<any>['ctx'] }
  const second = { items: [c2, d], ctx: { copies } as Batch<any>['ctx'] }
  const once = [takeOnce(refusing), takeOnce(refusing)]
  await once[0].consume(first)
  await once[1].consume(second)
  t.same(seen, [[3], [4]], 'the second batch hands on d alone: its copy of c was taken')
  t.same(second.ctx.rejected, [{ index: 1, message: 'no' }], "a refusal of d names its index in the batch it came in")
})

t.test('the service starts exporters before receivers and stops receivers first', async (t) => {
  const events: string[] = []
  const lifecycle = (name: string): Component => ({
    start: async () => void events.push(`start ${name}`),
    shutdown: async () => void events.push(`stop ${name}`),
  })
  const empty = Type.Object({})
  const ext: ExtensionFactory<typeof empty> = { kind: 'extension', type: 'ext', description: '', schema: empty, create: () => lifecycle('extension') }
  let feed: SignalConsumers = {}
  const recv: ReceiverFactory<typeof empty> = {
    kind: 'receiver', type: 'recv', description: '', signals: ['usage'], schema: empty,
    create: (_s, _c, next) => ((feed = next), lifecycle('receiver')),
  }
  const proc: ProcessorFactory<typeof empty> = {
    kind: 'processor', type: 'proc', description: '', signals: ['usage'], mutatesData: true, schema: empty,
    create: (_s, _c, _sig, next) => ({ ...lifecycle('processor'), consume: (b: Batch<any>) => next.consume({ ...b, items: b.items.map((i: string) => i + '+p') }) }),
  }
  const got: Record<string, string[]> = { one: [], two: [] }
  const exp = (name: 'one' | 'two'): ExporterFactory<typeof empty> => ({
    kind: 'exporter', type: `exp${name}`, description: '', signals: ['usage'], schema: empty,
    create: () => ({ ...lifecycle(`exporter ${name}`), consumers: { usage: sink(got[name]) } }),
  })
  const factories = factoryMap([ext, recv, proc, exp('one'), exp('two')] as Factory[])
  const { value: config } = checkAgainst(ConfigSchema, {
    storage: { path: tempDir() },
    server: { endpoint: '127.0.0.1:0' },
    extensions: { ext: {} },
    receivers: { recv: {} },
    processors: { proc: {} },
    exporters: { expone: {}, exptwo: {} },
    service: {
      extensions: ['ext'],
      pipelines: { usage: { receivers: ['recv'], processors: ['proc'], exporters: ['expone'] }, 'usage/2': { receivers: ['recv'], exporters: ['exptwo'] } },
    },
  }, '')
  t.teardown(() => removeDir(config.storage.path))
  const p = plan(config, factories)
  t.same(p.issues, [])
  const quiet = createTelemetry({ destination: new Writable({ write: (_c, _e, cb) => cb() }) })
  const service = new Service({ config, plan: p, telemetry: quiet })
  await service.start()
  await feed.usage!.consume({ items: ['r1'], ctx: {} })
  t.same(got, { one: ['r1+p'], two: ['r1'] }, 'a receiver listed by two pipelines feeds both; processors are per pipeline')
  await service.shutdown()
  await service.shutdown() // idempotent
  t.same(events, [
    'start extension', 'start exporter one', 'start exporter two', 'start processor', 'start receiver',
    'stop receiver', 'stop processor', 'stop exporter two', 'stop exporter one', 'stop extension',
  ])
  t.equal(service.state, 'stopped')
})
