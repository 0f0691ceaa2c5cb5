import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { parse } from 'yaml'
import { deepMerge } from '../../src/core/config/load.js'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import type { ExportConfigurations } from '../../src/extensions/exportconfigs/index.js'
import { completion } from '../fixtures/wire-examples.js'
import { call, startMeterd } from '../helpers/meterd.js'
import { startReceiver } from '../helpers/webhook-receiver.js'

// docs/routing.md's example, run as written: its two YAML blocks are read from the doc.
const doc = readFileSync(join(PACKAGE_ROOT, 'docs', 'routing.md'), 'utf8')
const example = doc.slice(doc.indexOf('## Example'), doc.indexOf('## Conditions'))
const blocks = [...example.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => parse(m[1]) as Record<string, unknown>)

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex')

t.test("the doc's example holds the issue's components as written", async (t) => {
  t.equal(blocks.length, 2)
  t.match(blocks[0], {
    connectors: { routing: { table: [{ condition: 'organizationName == "AcmeOrg"', pipelines: ['usage/acme'] }, { condition: 'environment in ["test", "dev"]', pipelines: ['usage/discard'] }], default_pipelines: ['usage/main'] } },
    processors: { 'attributes/redact': { actions: [{ key: 'inputMessages', action: 'delete' }, { key: 'subscriber.email', action: 'hash' }, { key: 'region', value: 'eu-west-1', action: 'insert' }] }, 'filter/costly': { keep: 'cost.total > 0' } },
  })
})

t.test('two organizations and a test environment in one batch land in the right store and webhooks, and nowhere else', async (t) => {
  const config = deepMerge(deepMerge(blocks[0] as never, blocks[1] as never), {
    extensions: { exportconfigs: { allow_private_destinations: ['127.0.0.1'], poll_interval_ms: 3_600_000 } },
  } as never) as Record<string, unknown>
  const m = await startMeterd(t, { config })
  const key = await m.key()
  const engine = m.service.getExtension<ExportConfigurations>('exportconfigs')!.engine!
  const acmeHook = await startReceiver(t)
  const mainHook = await startReceiver(t)
  const api = `${m.url}/profitstream/v2/api/export-configurations`
  t.equal((await call(api, { key, body: { name: 'acme', url: acmeHook.url } })).status, 201)
  t.equal((await call(api, { key, body: { name: 'main', url: mainHook.url } })).status, 201)

  const prompt = { inputMessages: '[{"role":"user","content":"my secret"}]', region: undefined }
  const acme = completion({ ...prompt, organizationName: 'AcmeOrg', subscriber: { id: 'u-1', email: 'Ana@Acme.io' } })
  const beta = completion({ ...prompt, organizationName: 'BetaOrg', subscriber: { id: 'u-2', email: 'bo@beta.io' } })
  const test = completion({ organizationName: 'GammaOrg', environment: 'test' })
  const unpriced = completion({ organizationName: 'BetaOrg', model: 'no-such-model-anywhere' })
  const res = await call(`${m.url}/meter/v2/ai/completions`, { key, body: [acme, beta, test, unpriced] })
  t.equal(res.status, 201, res.text)
  const ids: string[] = res.body.map((r: any) => r.id)
  t.equal(ids.length, 4, 'every record is answered, the dropped ones too')

  const stored = await call(`${m.url}/profitstream/v2/api/sources/metrics/ai/completions`, { key })
  const list: any[] = stored.body._embedded?.aICompletionMetricResourceList ?? []
  t.equal(stored.body.page.totalElements, 1)
  t.same(list.map((r) => r.id), [ids[1]], 'only BetaOrg is stored: AcmeOrg went to its webhook, the test record was discarded, the unpriced one filtered out')
  const kept = list[0]
  t.notOk('inputMessages' in kept, 'the prompt text was dropped before it was stored')
  t.equal(kept.subscriber.email, sha256('bo@beta.io'), 'the e-mail is stored hashed')
  t.equal(kept.region, 'eu-west-1', 'the region was inserted')

  await engine.settle()
  await acmeHook.waitFor(1)
  await mainHook.waitFor(1)
  await engine.settle()
  t.equal(acmeHook.received.length, 1, "acme's webhook got exactly its record")
  t.equal(mainHook.received.length, 1, 'the main webhook got exactly the stored record')
  const a = acmeHook.received[0].json.data
  const b = mainHook.received[0].json.data
  t.equal(a.id, ids[0])
  t.equal(b.id, ids[1])
  t.notOk('inputMessages' in a, 'no prompt text in the acme payload')
  t.notOk('inputMessages' in b, 'no prompt text in the main payload')
  t.equal(a.subscriber.email, sha256('ana@acme.io'), 'acme: the normalised e-mail, hashed')
  t.equal(b.subscriber.email, kept.subscriber.email, 'the same hash in the store and in the webhook payload')
  t.equal(a.region, 'eu-west-1')

  const metrics = (await call(`${m.url}/metrics`)).text
  t.match(metrics, /meterd_filter_dropped_items_total\{processor="filter\/discard",pipeline="usage\/discard"\} 1\b/, 'the discarded test record is counted')
  t.match(metrics, /meterd_filter_dropped_items_total\{processor="filter\/costly",pipeline="usage\/main"\} 1\b/, 'the unpriced record is counted')
})
