/**
 * A shared table as its component reads it (Store.view): rows another replica changed are shown
 * over the local ones from the moment the shared tables' adapter holds them (what
 * src/store/redis/tables.ts does when a change arrives), before their local commit, and only
 * within the range asked — another team's new tool never shows in a team's list, and an alert's
 * history shows the leader's new event in its place.
 */
import t from 'tap'
import type { AlertEvent } from '../../src/domain/alerts/model.js'
import { AlertStore } from '../../src/domain/alerts/store.js'
import { ToolRegistry } from '../../src/domain/tools/registry.js'
import type { Tool } from '../../src/domain/tools/tool.js'
import { Store } from '../../src/store/store.js'
import { removeDir, tempDir } from '../helpers/meterd.js'
import { toolBody } from '../helpers/pricing.js'

/** A store in a fresh directory, closed and removed when `t` ends. */
function openStore(t: { teardown(fn: () => Promise<void>): void }): Store {
  const dir = tempDir('meterd-view-')
  const store = new Store({ path: dir })
  t.teardown(async () => {
    await store.close()
    removeDir(dir)
  })
  return store
}

const element = { name: 'calls', aggregationType: 'COUNT', tiersMode: 'volume', unitPrice: '0.1', tiers: [] }

t.test('pending rows of another replica show through the view, within the range asked', async (t) => {
  const store = openStore(t)
  const tools = new ToolRegistry(store)
  const local = await tools.create('a', toolBody('local', element), Date.now())

  // Another replica's new tool for team b, and its removal of team a's tool, not committed here.
  const view = store.view<string[], Tool>('tools')
  const theirs: Tool = { ...local, id: 'their-tool', team: 'b', toolId: 'theirs' }
  const markNew = view.hold(JSON.stringify(['b', 'their-tool']), ['b', 'their-tool'], theirs)
  const markGone = view.hold(JSON.stringify(['a', local.id]), ['a', local.id], undefined)

  t.same(tools.list('b').map((x) => x.toolId), ['theirs'], "team b's list shows the other replica's new tool")
  t.same(tools.list('a').map((x) => x.toolId), [], "team a's list shows neither the removed tool nor team b's")
  t.equal(tools.get('a', local.id), undefined, 'the removal shows before it is committed here')
  t.equal(tools.get('b', 'their-tool')?.toolId, 'theirs', 'a row is read by its key')

  // Their commit is visible here: LMDB shows the rows from then on.
  view.settle(JSON.stringify(['b', 'their-tool']), markNew)
  view.settle(JSON.stringify(['a', local.id]), markGone)
  t.same(tools.list('b'), [], 'settled: the local database is read again (nothing was committed here)')
  t.equal(tools.get('a', local.id)?.toolId, 'local', "settled: team a's tool is LMDB's again")
})

t.test("an alert's history shows another replica's event before it is committed here, newest first", async (t) => {
  const store = openStore(t)
  const alerts = new AlertStore(store)
  const event = (id: string, at: string): AlertEvent => ({
    id, ruleId: 'rule-1', type: 'TRIGGERED', at, metricType: 'TOTAL_COST', operatorType: 'GREATER_THAN', value: '2', threshold: '1', windowFrom: at, windowTo: at,
  })
  const key = (e: AlertEvent): [string, number, string] => [e.ruleId, Date.parse(e.at), e.id]
  // Committed here: two events of the rule, one of another rule.
  const events = store.db<[string, number, string], AlertEvent>('alert-events')
  const older = event('evt_older', '2026-11-27T10:00:00.000Z')
  const newer = event('evt_newer', '2026-11-27T12:00:00.000Z')
  const other = { ...event('evt_other', '2026-11-27T13:00:00.000Z'), ruleId: 'rule-2' }
  await store.durable(store.root.transaction(() => [older, newer, other].forEach((e) => events.put(key(e), e))))

  // The leader (another replica) recorded one between them and the newest of all; not committed here yet.
  const view = store.view<[string, number, string], AlertEvent>('alert-events')
  const between = event('evt_between', '2026-11-27T11:00:00.000Z')
  const newest = event('evt_newest', '2026-11-27T14:00:00.000Z')
  for (const e of [between, newest]) view.hold(JSON.stringify(key(e)), key(e), e)

  const ids = (offset: number, limit: number) => alerts.history('rule-1', offset, limit).items.map((e) => e.id)
  t.same(ids(0, 10), ['evt_newest', 'evt_newer', 'evt_between', 'evt_older'], 'every event of the rule, newest first, the held ones in place')
  t.equal(alerts.history('rule-1', 0, 10).total, 4)
  t.same(ids(1, 2), ['evt_newer', 'evt_between'], 'a page of it')
  t.same(alerts.history('rule-2', 0, 10).items.map((e) => e.id), ['evt_other'], "another rule's history is its own")
})
