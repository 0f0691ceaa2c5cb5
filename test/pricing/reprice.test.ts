import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { completion } from '../fixtures/wire-examples.js'
import { call, writeConfig } from '../helpers/meterd.js'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { API, createTool, event, postEvent, readBack, startPricing, toolBody } from '../helpers/pricing.js'

t.test('unknown toolIds are stored unpriced, listed, and priced by `meterd reprice` once registered', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'meterd-reprice-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  const m = await startPricing(t, { dataDir })
  const key = await m.key()
  const early = await postEvent(m, key, event('later-tool', { usageMetadata: { pages: 10 }, timestamp: '2026-11-02T00:00:00Z' }))
  t.same([early.cost.source, early.cost.note], ['unpriced', 'unknown_tool'])
  const outside = await postEvent(m, key, event('later-tool', { usageMetadata: { pages: 5 }, timestamp: '2026-10-15T00:00:00Z' }))
  const model = completion({ provider: 'Acme', model: 'acme-1', transactionId: `unk-${Date.now()}` })
  t.equal((await call(`${m.url}/meter/v2/ai/completions`, { key, body: model })).status, 201)

  const listed = await call(`${m.url}${API}/tools/unpriced-events?toolId=later-tool`, { key })
  t.same(listed.body._embedded.toolEventMetricResourceList.map((r: any) => r.id), [early.id, outside.id], 'both listed, newest first')
  const metrics = await call(`${m.url}/metrics`)
  t.match(metrics.text, /meterd_unpriced_records_total\{kind="tool",reason="unknown_tool"\} 2/)

  await createTool(m, key, toolBody('later-tool', { name: 'pages', aggregationType: 'SUM', unitPrice: '0.5' }))
  await m.close()

  // The CLI, on the same data directory, with a config that also prices the unknown model.
  const cfg = writeConfig(dataDir, {
    storage: { path: dataDir },
    processors: { pricing: { models: [{ provider: 'acme', model: 'acme-1', effective: '2026-01-01', input: 1, output: 1 }] } },
  }, 'reprice.yaml')
  const run = (...args: string[]) => spawnSync(process.execPath, [join(PACKAGE_ROOT, 'bin/meterd.js'), 'reprice', '--config', cfg, ...args], { encoding: 'utf8', timeout: 30_000 })
  const dry = run('--from', '2026-11-01T00:00:00Z', '--to', '2026-12-01T00:00:00Z', '--kind', 'tool', '--dry-run', '--json')
  t.equal(dry.status, 0, dry.stderr)
  t.match(JSON.parse(dry.stdout), { examined: 1, priced: 1 })
  const res = run('--from', '2026-11-01T00:00:00Z', '--to', '2026-12-01T00:00:00Z', '--json')
  t.equal(res.status, 0, res.stderr)
  t.match(JSON.parse(res.stdout), { examined: 2, priced: 2, unpriced: 0 }, 'the November tool event and the completion')
  const twice = run('--from', '2026-11-01T00:00:00Z', '--to', '2026-12-01T00:00:00Z', '--json')
  t.match(JSON.parse(twice.stdout), { examined: 0, priced: 0 }, 'a second run finds nothing left')

  const m2 = await startPricing(t, { dataDir })
  const after = await readBack(m2, key, 'tool', early.transactionId)
  t.same([after.cost.source, after.cost.total], ['registry', '5'])
  t.equal((await readBack(m2, key, 'tool', outside.transactionId)).cost.source, 'unpriced', 'outside --from/--to: left alone')
  t.equal((await readBack(m2, key, 'completion', model.transactionId as string)).cost.source, 'pricebook')
  const next = await postEvent(m2, key, event('later-tool', { usageMetadata: { pages: 2 }, timestamp: '2026-11-20T00:00:00Z' }))
  t.same(next.cost.quantities, { pages: '2' })
  t.equal(next.cost.total, '1', 'the repriced event counts in the period aggregate exactly once')
  const left = await call(`${m2.url}${API}/tools/unpriced-events`, { key })
  t.same(left.body._embedded.toolEventMetricResourceList.map((r: any) => r.id), [outside.id])
})
