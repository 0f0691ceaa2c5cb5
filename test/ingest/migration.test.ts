/**
 * Issue 15 #1, upgrading: a data directory written by a build with dedup and replay per account
 * (test/fixtures/layout-v1, made by that build; see make.mjs there) opens with no dedup and no
 * replay lost, each now under its record's team.
 */
import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { Store } from '../../src/store/store.js'
import { call, removeDir, startMeterd, tempDir } from '../helpers/meterd.js'

const FIXTURE = join(PACKAGE_ROOT, 'test', 'fixtures', 'layout-v1')
const manifest = JSON.parse(readFileSync(join(FIXTURE, 'manifest.json'), 'utf8')) as {
  at: number
  keys: { teamA: string; teamB: string }
  ids: { aCompletion: string; aTool: string; aIdempotent: string; bCompletion: string }
}
const C = '/meter/v2/ai/completions'
const LIST = '/profitstream/v2/api/sources/metrics'

/** The same bodies make.mjs posted. */
const completion = (extra: Record<string, unknown>) => ({
  model: 'gpt-4o-mini', provider: 'OpenAI', inputTokenCount: 12, outputTokenCount: 5, totalTokenCount: 17,
  stopReason: 'END', requestTime: '2026-11-21T23:55:47.661Z', completionStartTime: '2026-11-21T23:55:47.678Z',
  responseTime: '2026-11-21T23:55:47.678Z', requestDuration: 17, organizationName: 'AcmeOrg', productName: 'Gold', ...extra,
})

function unpack(): string {
  const dir = tempDir('meterd-layout-v1-')
  execFileSync('tar', ['-xzf', join(FIXTURE, 'data.tar.gz'), '-C', dir])
  return join(dir, 'data')
}

t.test('an old data directory migrates on open: dedup, replay and the transactionId filter keep working, per team', async (t) => {
  const dataDir = unpack()
  t.teardown(() => removeDir(join(dataDir, '..')))
  // Within the windows of the entries the old build wrote.
  const m = await startMeterd(t, { dataDir, frozenNow: manifest.at + 60_000 })
  const { teamA, teamB } = manifest.keys

  const byTx = (kind: string, tx: string, key: string) => call(`${m.url}${LIST}/${kind}?transactionId=${tx}`, { key })
  const listed = (res: { body: any }) => Object.values(res.body._embedded as Record<string, { id: string }[]>)[0].map((r) => r.id)
  t.same(listed(await byTx('ai/completions', 'tx-shared', teamA)), [manifest.ids.aCompletion], 'the transactionId filter finds the old completion')
  t.same(listed(await byTx('tool/events', 'tool-tx-1', teamA)), [manifest.ids.aTool], 'and the old tool event')
  t.same(listed(await byTx('ai/completions', 'tx-b-only', teamB)), [manifest.ids.bCompletion], "and team b's")

  const retry = await call(m.url + C, { key: teamA, body: completion({ transactionId: 'tx-shared' }) })
  t.equal(retry.body.id, manifest.ids.aCompletion, "team a's retry is still deduplicated against the old record")
  const tool = await call(m.url + '/meter/v2/tool/events', { key: teamA, body: { toolId: 'web-search', timestamp: '2026-11-21T23:59:06.103Z', transactionId: 'tool-tx-1' } })
  t.equal(tool.body.id, manifest.ids.aTool, 'so is its tool event')
  const replay = await call(m.url + C, { key: teamA, body: completion({ model: 'gpt-4o' }), headers: { 'idempotency-key': 'idem-shared' } })
  t.equal(replay.headers.get('idempotent-replayed'), 'true', "team a's Idempotency-Key still replays")
  t.equal(replay.body.id, manifest.ids.aIdempotent)

  const bOwn = await call(m.url + C, { key: teamB, body: completion({ transactionId: 'tx-shared', model: 'o3' }) })
  t.equal(bOwn.status, 201)
  t.not(bOwn.body.id, manifest.ids.aCompletion, "team b's own tx-shared is its own record now")
  const bKey = await call(m.url + C, { key: teamB, body: completion({ model: 'o3' }), headers: { 'idempotency-key': 'idem-shared' } })
  t.equal(bKey.status, 201, "team b may use the Idempotency-Key team a used: no 409, no replay of a's answer")
  t.not(bKey.body.id, manifest.ids.aIdempotent)
})

t.test('the migration runs once and is recorded', async (t) => {
  const dataDir = unpack()
  t.teardown(() => removeDir(join(dataDir, '..')))
  const first = new Store({ path: dataDir })
  const keys = [...first.usage.dedup.getKeys({})]
  t.same(keys.map((k) => k[0]).sort(), ['team-a', 'team-a', 'team-b'], 'dedup keys now start with the team')
  t.same([...first.usage.replay.getKeys({})], [['team-a', 'idem-shared']], 'the replay key too')
  t.equal(first.db('meta').get('usage.layout'), 5, 'the current layout (5: record bodies may be in the encoding of record-codec.ts format 2)')
  t.equal(first.db('usage-dedup').getKeysCount({}), 0, 'the dedup entries left the database of lmdb-js array keys')
  t.equal(first.db('usage-index').getKeysCount({}), 0, 'so did the index entries')
  await first.close()
  const again = new Store({ path: dataDir })
  t.same([...again.usage.dedup.getKeys({})], keys, 'opening again changes nothing')
  await again.close()
})
