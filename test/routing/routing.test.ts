import { execFile } from 'node:child_process'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { FACTORIES } from '../../src/components.js'
import { DEFAULT_CONFIG_PATH } from '../../src/core/config/load.js'
import { resolveConfig } from '../../src/host/resolve.js'
import { factoryMap } from '../../src/host/graph.js'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { completion } from '../fixtures/wire-examples.js'
import { ADMIN_KEY, call, freePort, startMeterd, tempDir, writeConfig, type Meterd, until } from '../helpers/meterd.js'

const LIST = '/profitstream/v2/api/sources/metrics/ai/completions?size=1000'

/** transactionId → how many stored records carry it, and the id stored for it. */
async function stored(m: Meterd, key: string): Promise<Map<string, { n: number; id: string }>> {
  const res = await call(m.url + LIST, { key })
  const out = new Map<string, { n: number; id: string }>()
  for (const r of res.body._embedded.aICompletionMetricResourceList as any[]) out.set(r.transactionId, { n: (out.get(r.transactionId)?.n ?? 0) + 1, id: r.id })
  return out
}

t.test("one branch's queue full answers 503 and stores nothing; the retries store each record once", async (t) => {
  // AcmeOrg's records go to an upstream meterd through a queue of one record; the rest to the local store.
  const port = await freePort()
  const side = await startMeterd(t, {
    config: {
      connectors: { routing: { table: [{ condition: 'organizationName == "AcmeOrg"', pipelines: ['usage/acme'] }], default_pipelines: ['usage/main'] } },
      exporters: { upstream: { endpoint: `http://127.0.0.1:${port}`, api_key: ADMIN_KEY, max_queue_records: 1, initial_backoff_ms: 20, max_backoff_ms: 100 } },
      service: {
        pipelines: {
          usage: { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'], exporters: ['routing'] },
          'usage/acme': { receivers: ['routing'], exporters: ['upstream'] },
          'usage/main': { receivers: ['routing'], exporters: ['lmdb', 'analytics'] },
        },
      },
    },
  })
  const key = await side.key()
  const a1 = completion({ organizationName: 'AcmeOrg' })
  const a2 = completion({ organizationName: 'AcmeOrg' })
  const m1 = completion({ organizationName: 'BetaOrg' })
  t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body: a1 })).status, 201, 'a1 is queued: the queue is full now (nobody upstream yet)')

  const failed = await call(`${side.url}/meter/v2/ai/completions`, { key, body: [a2, m1] })
  t.equal(failed.status, 503, 'the acme branch is full: the request is not acknowledged')
  t.ok(Number(failed.headers.get('retry-after')) >= 1, 'with Retry-After')
  // Refused as a whole: had the main branch stored m1, a retry of a record sent to both branches
  // (lmdb and upstream side by side) would be answered from dedup and never reach the upstream.
  t.equal((await stored(side, key)).size, 0, 'nothing of the request is in the local store')

  // The upstream comes up; the queue drains.
  const up = await startMeterd(t, { config: { server: { endpoint: `127.0.0.1:${port}` } } })
  await until('the queue to drain', async () => (/meterd_upstream_queue_records\{exporter="upstream"\} 0\b/.test((await call(`${side.url}/metrics`)).text) ? true : undefined))

  const retried = await call(`${side.url}/meter/v2/ai/completions`, { key, body: [a2, m1] })
  t.equal(retried.status, 201, retried.text)
  const after = await stored(side, key)
  t.equal(after.get(m1.transactionId as string)?.n, 1, 'the retry stored the main record once')
  t.equal(retried.body[1].id, after.get(m1.transactionId as string)!.id, 'and answered with its stored id')
  t.equal(after.size, 1)

  const upstream = await until('both acme records upstream', async () => {
    const s = await stored(up, ADMIN_KEY)
    return s.has(a2.transactionId as string) ? s : undefined
  })
  await new Promise((r) => setTimeout(r, 200))
  const final = await stored(up, ADMIN_KEY)
  t.same(
    [...final].map(([tx, v]) => [tx, v.n]).sort(),
    [[a1.transactionId, 1], [a2.transactionId, 1]].sort(),
    'upstream holds each acme record once, and no main record',
  )
  t.ok(upstream)
})

t.test('match_once: false sends a record to every matching route; each pipeline changes its own copy', async (t) => {
  const m = await startMeterd(t, {
    config: {
      connectors: {
        routing: {
          match_once: false,
          table: [
            { condition: 'organizationName == "AcmeOrg"', pipelines: ['usage/main'] },
            { condition: 'provider == "openai" and inputTokenCount >= 10', pipelines: ['usage/audit'] },
          ],
        },
      },
      processors: {
        'attributes/audit': { actions: [{ key: 'subscriber.email', action: 'delete' }, { key: 'attributes.audited', value: true, action: 'set' }] },
        'attributes/main': {
          actions: [
            { key: 'agent', to: 'body.agentName', action: 'rename' },
            { key: 'traceId', action: 'truncate', length: 3 },
            { key: 'productName', value: 'Platinum', action: 'update' },
            { key: 'ticketId', value: 'T-1', action: 'update' },
          ],
        },
      },
      exporters: { debug: { verbosity: 'detailed' } },
      service: {
        pipelines: {
          usage: { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'], exporters: ['routing'] },
          'usage/main': { receivers: ['routing'], processors: ['attributes/main'], exporters: ['lmdb'] },
          'usage/audit': { receivers: ['routing'], processors: ['attributes/audit'], exporters: ['debug'] },
        },
      },
    },
  })
  const key = await m.key()
  const both = completion({ organizationName: 'AcmeOrg', traceId: 'trace-12345' })
  const auditOnly = completion({ organizationName: 'BetaOrg' })
  const neither = completion({ organizationName: 'BetaOrg', provider: 'Anthropic' })
  const res = await call(`${m.url}/meter/v2/ai/completions`, { key, body: [both, auditOnly, neither] })
  t.equal(res.status, 201, res.text)
  const list = (await call(m.url + LIST, { key })).body._embedded.aICompletionMetricResourceList as any[]
  t.same(list.map((r) => r.id), [res.body[0].id], 'only the AcmeOrg record reached the store')
  const r = list[0]
  t.equal(r.subscriber.email, 'u1@example.com', "the audit pipeline's delete did not touch the stored copy")
  t.notOk(r.attributes?.audited, 'nor its set')
  t.equal(r.agentName, 'agent-a', 'renamed')
  t.notOk('agent' in r, 'the old name is gone')
  t.equal(r.traceId, 'tra', 'truncated')
  t.equal(r.productName, 'Platinum', 'updated (it was present)')
  t.notOk('ticketId' in r, 'update does not add a field that was absent')
  const audited = m.logs.map((l) => JSON.parse(l)).filter((l) => l.msg === 'debug exporter').map((l) => l.item)
  t.same(audited.map((i) => i.id).sort(), [res.body[0].id, res.body[1].id].sort(), 'the audit pipeline got both OpenAI records with ≥ 10 input tokens')
  for (const i of audited) {
    t.notOk(i.body.subscriber?.email, 'audit copy: e-mail deleted')
    t.equal(i.body.attributes.audited, true)
    t.equal(i.attribution.subscriberEmail, '', 'and its dimension emptied')
  }
  const metrics = (await call(`${m.url}/metrics`)).text
  t.match(metrics, /meterd_routing_unrouted_items_total\{component="routing"\} 1\b/, 'the record no route matched (and no default) is counted')
})

/** The pipelines around a routing connector, for validate cases. */
const graph = (connector: Record<string, unknown>, { pipelineProcessors = [], ...extra }: Record<string, unknown> = {}) => ({
  connectors: { routing: connector },
  ...extra,
  service: {
    pipelines: {
      usage: { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'], exporters: ['routing'] },
      'usage/main': { receivers: ['routing'], processors: pipelineProcessors, exporters: ['lmdb'] },
    },
  },
})

function issues(config: Record<string, unknown>) {
  const dir = tempDir()
  const file = writeConfig(dir, config)
  return resolveConfig([DEFAULT_CONFIG_PATH, file], factoryMap(FACTORIES), {}).issues
}

t.test('validate rejects bad conditions, actions and routes, each with its path', async (t) => {
  const cases: [string, Record<string, unknown>, string, RegExp][] = [
    ['an unknown field', graph({ table: [{ condition: 'colour == "red"', pipelines: ['usage/main'] }] }), 'connectors.routing.table[0].condition', /column 1: unknown field "colour"/],
    ['a type mismatch', graph({ default_pipelines: ['usage/main'] }, { processors: { 'filter/x': { keep: 'model > 3' } }, pipelineProcessors: ['filter/x'] }), 'processors.filter/x.keep', /column 1: model is a string: > compares numbers/],
    ['a syntax error', graph({ table: [{ condition: 'kind == "tool" &&', pipelines: ['usage/main'] }] }), 'connectors.routing.table[0].condition', /column 16: unexpected "&"/],
    ['an unknown pipeline', graph({ table: [{ condition: 'true', pipelines: ['usage/main', 'usage/nowhere'] }] }), 'connectors.routing.table[0].pipelines[1]', /pipeline "usage\/nowhere" is not configured/],
    ['a pipeline not fed by the connector', graph({ default_pipelines: ['usage'] }), 'connectors.routing.default_pipelines[0]', /does not receive from routing/],
    ['keep and drop together', graph({ default_pipelines: ['usage/main'] }, { processors: { 'filter/x': { keep: 'true', drop: 'false' } }, pipelineProcessors: ['filter/x'] }), 'processors.filter/x', /exactly one of keep or drop/],
    ['an action on a derived field', graph({ default_pipelines: ['usage/main'] }, { processors: { 'attributes/x': { actions: [{ key: 'cost.total', action: 'delete' }] } }, pipelineProcessors: ['attributes/x'] }), 'processors.attributes/x.actions[0].key', /derived by meterd/],
    ['a value of the wrong type', graph({ default_pipelines: ['usage/main'] }, { processors: { 'attributes/x': { actions: [{ key: 'region', action: 'set', value: 'eu' }, { key: 'inputTokenCount', action: 'set', value: 'x' }] } }, pipelineProcessors: ['attributes/x'] }), 'processors.attributes/x.actions[1].value', /inputTokenCount is a number, not a string/],
  ]
  for (const [name, config, path, message] of cases) {
    const found = issues(config)
    const hit = found.find((i) => i.path === path)
    t.ok(hit, `${name}: reported at ${path} (got ${JSON.stringify(found)})`)
    if (hit) t.match(hit.message, message, name)
  }
  // A routing connector used only as an exporter: the graph check names it.
  const oneSided = issues({
    connectors: { routing: { default_pipelines: ['usage'] } },
    service: { pipelines: { usage: { receivers: ['metering'], processors: ['validate'], exporters: ['routing'] } } },
  })
  t.match(oneSided.find((i) => i.path === 'connectors.routing')?.message, /must be used as an exporter in one pipeline and as a receiver in another/, 'a connector used only on one side')
  t.same(issues(graph({ table: [{ condition: 'environment in ["test", "dev"] or cost.total > 0.5', pipelines: ['usage/main'] }], default_pipelines: ['usage/main'] })), [], 'a good table passes')

  // And the CLI: `meterd validate` exits 78 with the path.
  const file = writeConfig(tempDir(), graph({ table: [{ condition: 'model > 3', pipelines: ['usage/main'] }] }))
  const out = await promisify(execFile)(process.execPath, [join(PACKAGE_ROOT, 'bin', 'meterd.js'), 'validate', '--config', DEFAULT_CONFIG_PATH, '--config', file]).catch((e) => e)
  t.equal(out.code, 78)
  t.match(out.stderr, 'connectors.routing.table[0].condition: column 1: model is a string')
})
