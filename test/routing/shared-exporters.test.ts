// A record that two routes (match_once: false) send to pipelines ending in the same exporter is
// stored, counted, queued and delivered once: whichever way it comes, and however the requests
// around it arrive (docs/routing.md, "A record in several pipelines").
import t from 'tap'
import { RetryableError } from '../../src/core/errors.js'
import type { ExportConfigurations } from '../../src/extensions/exportconfigs/index.js'
import type { ConsumingComponent } from '../../src/host/component.js'
import { haveClickHouse, startClickHouse } from '../helpers/clickhouse-server.js'
import { completion } from '../fixtures/wire-examples.js'
import { get } from '../helpers/analytics.js'
import { ADMIN_KEY, call, removeDir, startMeterd, tempDir, until, type Meterd } from '../helpers/meterd.js'
import { startReceiver, type Receiver } from '../helpers/webhook-receiver.js'

const C = '/meter/v2/ai/completions'
const LIST = '/profitstream/v2/api/sources/metrics/ai/completions?size=1000'
const HEAD = { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'], exporters: ['routing'] }
/** AcmeOrg's records go to usage/a, OpenAI's to usage/b: an AcmeOrg OpenAI record to both. */
const TABLE = [
  { condition: 'organizationName == "AcmeOrg"', pipelines: ['usage/a'] },
  { condition: 'provider == "openai"', pipelines: ['usage/b'] },
]
const recent = () => new Date(Date.now() - 60_000).toISOString()

/** The stored records: id → how many times the read API lists it. */
async function stored(m: Meterd, key: string): Promise<Map<string, number>> {
  const list = ((await call(m.url + LIST, { key })).body._embedded?.aICompletionMetricResourceList ?? []) as { id: string }[]
  const out = new Map<string, number>()
  for (const r of list) out.set(r.id, (out.get(r.id) ?? 0) + 1)
  return out
}

const accepted = (metrics: string, component: string): number =>
  Number(new RegExp(`^meterd_component_accepted_items_total\\{kind="exporter",component="${component}"\\} (\\S+)$`, 'm').exec(metrics)?.[1] ?? NaN)

async function webhook(t: Tap.Test, m: Meterd, key: string, name = 'main'): Promise<Receiver> {
  const hook = await startReceiver(t)
  const res = await call(`${m.url}/profitstream/v2/api/export-configurations`, { key, body: { name, url: hook.url } })
  if (res.status !== 201) t.fail(`export configuration: ${res.status} ${res.text}`)
  return hook
}

/** Lets the delivery engine send everything queued, and a little longer for anything more to show. */
async function delivered(m: Meterd, hook: Receiver, n: number): Promise<unknown[]> {
  const engine = m.service.getExtension<ExportConfigurations>('exportconfigs')!.engine!
  await engine.settle()
  await hook.waitFor(n)
  await new Promise((r) => setTimeout(r, 200))
  await engine.settle()
  return hook.received.map((r) => r.json)
}

t.test('two routes ending in lmdb, analytics and a webhook: each record stored, counted and delivered once', async (t) => {
  const dataDir = tempDir('meterd-shared-exporters-')
  t.teardown(() => removeDir(dataDir))
  const config = {
    connectors: { routing: { match_once: false, table: TABLE } },
    // usage/a keeps only records with 10 input tokens or more: one it drops still reaches the shared exporters through usage/b.
    processors: { 'filter/a': { keep: 'inputTokenCount >= 10' } },
    extensions: { exportconfigs: { allow_private_destinations: ['127.0.0.1'], poll_interval_ms: 3_600_000 } },
    service: {
      pipelines: {
        usage: HEAD,
        'usage/a': { receivers: ['routing'], processors: ['filter/a'], exporters: ['lmdb', 'analytics', 'webhook'] },
        'usage/b': { receivers: ['routing'], exporters: ['lmdb', 'analytics', 'webhook'] },
      },
    },
  }
  let m = await startMeterd(t, { config, dataDir })
  const key = await m.key()
  const hook = await webhook(t, m, key)

  const rec = (cost: number, extra: Record<string, unknown> = {}) => completion({ organizationName: 'AcmeOrg', requestTime: recent(), totalCost: cost, ...extra })
  const ids: string[] = []
  const post = async (body: unknown) => {
    const res = await call(m.url + C, { key, body })
    if (res.status !== 201) t.fail(`answered ${res.status}: ${res.text}`)
    ids.push(...(Array.isArray(res.body) ? res.body : [res.body]).map((r: { id: string }) => r.id))
  }
  // One record alone; a batch mixing records for both routes with ones for a single route (and
  // one usage/a drops); two requests in flight together (their writes share a commit); two back to back.
  await post(rec(1))
  await post([rec(2), rec(4, { provider: 'Anthropic' }), rec(8, { organizationName: 'BetaOrg' }), rec(16, { inputTokenCount: 5, totalTokenCount: 10 })])
  await Promise.all([post(rec(32)), post(rec(64))])
  await post(rec(128))
  await post([rec(256)])
  t.equal(ids.length, 9)
  t.equal(new Set(ids).size, 9, 'each record answered with an id of its own')

  const inStore = await stored(m, key)
  t.same([...inStore.keys()].sort(), [...ids].sort(), 'every acknowledged id is stored (a 201 holds)')
  t.same([...inStore.values()].filter((n) => n !== 1), [], 'each once')

  const summary = (await get(m, key, 'summary')).body.period
  t.same([summary.records, summary.completions, summary.cost], [9, 9, '511'], 'analytics counts each record once: 1 + 2 + … + 256')
  const agents = await get(m, key, 'agents/cost', { from: new Date(Date.now() - 3_600_000).toISOString(), to: new Date(Date.now() + 60_000).toISOString() })
  t.equal(agents.body.totals.totalCost, '511', 'and so do the totals of agents/cost')

  const events = (await delivered(m, hook, 9)) as { id: string; data: { id: string } }[]
  t.same(events.map((e) => e.data.id).sort(), [...ids].sort(), 'the webhook got one event per record')
  t.equal(new Set(events.map((e) => e.id)).size, 9, 'under an event id each')

  const metrics = (await call(`${m.url}/metrics`)).text
  t.same(['lmdb', 'analytics', 'webhook'].map((c) => accepted(metrics, c)), [9, 9, 9], 'and each exporter says it took 9 records')

  // What a restart reads back from the store agrees with what was counted live.
  await m.close()
  m = await startMeterd(t, { config, dataDir })
  const again = await until('the stored records read back', async () => {
    const res = await get(m, key, 'summary')
    return res.status === 200 ? res.body.period : undefined
  })
  t.same([again.records, again.cost], [9, '511'], 'after a restart: the same totals')
})

t.test('upstream and clickhouse exporters two routes share queue and send each record once', async (t) => {
  if (!haveClickHouse) return t.fail('clickhouse-server is not installed (.ci/run installs it)')
  const ch = await startClickHouse()
  t.teardown(async () => {
    await ch.stop()
    ch.remove()
  })
  const up = await startMeterd(t, {})
  const both = ['lmdb', 'upstream', 'clickhouse']
  const m = await startMeterd(t, {
    config: {
      connectors: { routing: { match_once: false, table: TABLE } },
      exporters: {
        upstream: { endpoint: up.url, api_key: ADMIN_KEY, initial_backoff_ms: 20, max_backoff_ms: 100 },
        clickhouse: { endpoint: ch.url, database: 'shared', flush_interval_ms: 20, initial_backoff_ms: 20, max_backoff_ms: 200 },
      },
      service: { pipelines: { usage: HEAD, 'usage/a': { receivers: ['routing'], exporters: both }, 'usage/b': { receivers: ['routing'], exporters: both } } },
    },
  })
  const key = await m.key()
  const sent = [completion(), completion(), completion({ organizationName: 'BetaOrg' }), completion()]
  t.equal((await call(m.url + C, { key, body: sent[0] })).status, 201)
  t.equal((await call(m.url + C, { key, body: sent.slice(1) })).status, 201)

  const upstream = await until('the upstream to hold the records', async () => {
    const s = await stored(up, ADMIN_KEY)
    return s.size >= 4 ? s : undefined
  })
  const rows = await until('clickhouse to hold the records', async () => {
    const res = await fetch(`${ch.url}/`, { method: 'POST', body: 'SELECT count(), uniqExact(id) FROM shared.usage_records' }).catch(() => undefined)
    const text = res?.ok ? (await res.text()).trim() : ''
    return text.split('\t').map(Number)[0] >= 4 ? text : undefined
  }, 30_000)
  await new Promise((r) => setTimeout(r, 300))
  t.same([...(await stored(up, ADMIN_KEY)).values()], [1, 1, 1, 1], 'the upstream stored each record once')
  t.equal(upstream.size, 4)
  const after = await (await fetch(`${ch.url}/`, { method: 'POST', body: 'SELECT count(), uniqExact(id) FROM shared.usage_records' })).text()
  t.equal(after.trim(), '4\t4', 'ClickHouse holds one row per record')
  t.equal(rows, '4\t4')
  const metrics = (await call(`${m.url}/metrics`)).text
  t.match(metrics, /meterd_upstream_sent_records_total\{exporter="upstream"\} 4\b/, 'the upstream was sent each record once')
  t.match(metrics, /meterd_clickhouse_inserted_records_total\{exporter="clickhouse"\} 4\b/, 'ClickHouse was sent each record once')
  t.same(both.map((c) => accepted(metrics, c)), [4, 4, 4], 'each exporter took 4 records')
})

t.test('a receiver feeding two pipelines that share an exporter: the same rule', async (t) => {
  const m = await startMeterd(t, {
    config: {
      service: {
        pipelines: {
          usage: { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'], exporters: ['lmdb', 'analytics'] },
          'usage/copy': { receivers: ['metering'], processors: ['validate', 'attribution', 'pricing'], exporters: ['lmdb', 'analytics'] },
        },
      },
    },
  })
  const key = await m.key()
  const res = await call(m.url + C, { key, body: [completion({ requestTime: recent(), totalCost: 3 }), completion({ requestTime: recent(), totalCost: 5 })] })
  t.equal(res.status, 201, res.text)
  t.same([...(await stored(m, key)).values()], [1, 1], 'stored once each')
  const summary = (await get(m, key, 'summary')).body.period
  t.same([summary.records, summary.cost], [2, '8'], 'counted once each')
})

t.test('separate webhook exporters each deliver: one event per exporter, as documented', async (t) => {
  const m = await startMeterd(t, {
    config: {
      connectors: { routing: { match_once: false, table: TABLE } },
      extensions: { exportconfigs: { allow_private_destinations: ['127.0.0.1'], poll_interval_ms: 3_600_000 } },
      exporters: { 'webhook/a': { configurations: ['a'] }, 'webhook/b': { configurations: ['b'] } },
      service: {
        pipelines: {
          usage: HEAD,
          'usage/a': { receivers: ['routing'], exporters: ['lmdb', 'webhook/a'] },
          'usage/b': { receivers: ['routing'], exporters: ['lmdb', 'webhook/b'] },
        },
      },
    },
  })
  const key = await m.key()
  const a = await webhook(t, m, key, 'a')
  const b = await webhook(t, m, key, 'b')
  const res = await call(m.url + C, { key, body: completion() })
  t.equal(res.status, 201, res.text)
  const toA = (await delivered(m, a, 1)) as { data: { id: string } }[]
  const toB = (await delivered(m, b, 1)) as { data: { id: string } }[]
  t.same([toA.map((e) => e.data.id), toB.map((e) => e.data.id)], [[res.body.id], [res.body.id]], "each route's webhook got the record once")
})

t.test("a retry after another part failed: a webhook-only part delivers again, one beside lmdb does not (the doc's warning)", async (t) => {
  for (const [b, events] of [[['webhook'], 2], [['lmdb', 'webhook'], 1]] as const) {
    const m = await startMeterd(t, {
      config: {
        connectors: { routing: { match_once: false, table: TABLE } },
        extensions: { exportconfigs: { allow_private_destinations: ['127.0.0.1'], poll_interval_ms: 3_600_000 } },
        exporters: { debug: {} },
        service: { pipelines: { usage: HEAD, 'usage/a': { receivers: ['routing'], exporters: ['debug'] }, 'usage/b': { receivers: ['routing'], exporters: [...b] } } },
      },
    })
    const key = await m.key()
    const hook = await webhook(t, m, key)
    // usage/a's exporter fails the first time: the request is answered 503 after usage/b's part is stored.
    const debug = m.service.component<ConsumingComponent>('exporter', 'debug')!.consumers.usage!
    const consume = debug.consume
    debug.consume = async () => {
      debug.consume = consume
      throw new RetryableError('down for a moment')
    }
    const body = completion()
    const first = await call(m.url + C, { key, body })
    t.equal(first.status, 503, first.text)
    const retry = await call(m.url + C, { key, body })
    t.equal(retry.status, 201, retry.text)
    const got = (await delivered(m, hook, events)) as { id: string; data: { transactionId: string } }[]
    t.equal(got.length, events, `usage/b = [${b}]: ${events} event(s) for the record`)
    t.same(new Set(got.map((e) => e.data.transactionId)), new Set([body.transactionId]))
    t.equal(new Set(got.map((e) => e.id)).size, events, 'under an event id each')
  }
})
