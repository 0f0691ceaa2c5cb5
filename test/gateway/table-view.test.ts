/**
 * A shared table as its component reads it (Store.view): rows another replica changed are shown
 * over the local ones from the moment the shared tables' adapter holds them (what
 * src/store/redis/tables.ts does when a change arrives), before their local commit, and only
 * within the range asked — another team's new tool never shows in a team's list.
 */
import t from 'tap'
import { ToolRegistry } from '../../src/domain/tools/registry.js'
import type { Tool } from '../../src/domain/tools/tool.js'
import { Store } from '../../src/store/store.js'
import { removeDir, tempDir } from '../helpers/meterd.js'
import { toolBody } from '../helpers/pricing.js'

const element = { name: 'calls', aggregationType: 'COUNT', tiersMode: 'volume', unitPrice: '0.1', tiers: [] }

t.test('pending rows of another replica show through the view, within the range asked', async (t) => {
  const dir = tempDir('meterd-view-')
  const store = new Store({ path: dir })
  t.teardown(async () => {
    await store.close()
    removeDir(dir)
  })
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
