/**
 * RecentIds (src/exporters/analytics/recent.ts): an id taken in is refused again while it is
 * kept, and kept as long as a read-back may still meet it: `keepMs`, or back to the oldest floor
 * another worker told (a record committed long after it was made, see reconcile.test.ts).
 */
import t from 'tap'
import { RecentIds } from '../../src/exporters/analytics/recent.js'

t.test('ids go after keepMs, unless a floor told before them holds them', async (t) => {
  const since = Date.now()
  let floor = since - 60_000
  const plain = new RecentIds(0)
  const held = new RecentIds(0, () => floor)
  t.teardown(() => (plain.stop(), held.stop()))
  t.ok(plain.claim('a') && held.claim('a'), 'taken in the first time')
  t.notOk(plain.claim('a') || held.claim('a'), 'refused the second time')
  // Two generations later (a tick a second).
  await new Promise((r) => setTimeout(r, 2200))
  t.ok(plain.claim('a'), 'dropped once older than keepMs')
  t.notOk(held.claim('a'), 'kept while another worker\'s floor is older than it')
  floor = Date.now()
  await new Promise((r) => setTimeout(r, 2200))
  t.ok(held.claim('a'), 'dropped once the floor passed it')
})
