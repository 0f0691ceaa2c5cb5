import t from 'tap'
import { completion } from '../fixtures/wire-examples.js'
import { API, get, registerTool, seed } from '../helpers/analytics.js'
import { dataset, NOW } from '../helpers/analytics-dataset.js'
import { ADMIN_KEY, call, removeDir, spawnMeterd, tempDir } from '../helpers/meterd.js'

const SEEDED = { from: new Date(NOW - 2 * 86_400_000).toISOString(), to: new Date(NOW).toISOString() }
// The records posted under load, on a day of their own.
const LOADED = { from: '2026-12-01T00:00:00.000Z', to: '2026-12-02T00:00:00.000Z' }
const PATHS = ['agents/cost', 'tools/cost-over-time', 'traces/cost-distribution', 'traces', 'providers', 'models', 'summary']

async function answers(url: string): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {}
  for (const path of PATHS) {
    const res = await get({ url }, ADMIN_KEY, path, { ...SEEDED, ...(path === 'traces' ? { size: 1000 } : {}), ...(path.endsWith('distribution') ? { threshold: '0.05' } : {}) })
    if (res.status !== 200) throw new Error(`${path}: ${res.status} ${res.text}`)
    out[path] = res.body
  }
  return out
}

/** Waits for the restarted daemon to finish reading the stored records (503 until then). */
async function whenReady(url: string): Promise<void> {
  const until = Date.now() + 30_000
  for (;;) {
    const res = await get({ url }, ADMIN_KEY, 'summary')
    if (res.status === 200) return
    if (res.status !== 503 || res.body.error.code !== 'analytics_loading' || Date.now() > until) throw new Error(`${res.status} ${res.text}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

t.test('after kill -9 and a restart nothing is missing and nothing counts twice', async (t) => {
  const dataDir = tempDir('meterd-analytics-crash-')
  t.teardown(() => removeDir(dataDir))
  const first = await spawnMeterd(t, { dataDir })
  await registerTool(first, ADMIN_KEY, 'search')
  await registerTool(first, ADMIN_KEY, 'scrape')
  await seed(first, ADMIN_KEY, dataset())
  const before = await answers(first.url)

  // Then load that is still in flight when the process is killed.
  const acked = new Set<string>()
  let stop = false
  const load = Promise.all(
    Array.from({ length: 8 }, async () => {
      while (!stop) {
        const body = completion({ requestTime: '2026-12-01T10:00:00.000Z', totalCost: 0.001, traceId: `load-${acked.size % 50}` })
        try {
          const res = await call(first.url + '/meter/v2/ai/completions', { key: ADMIN_KEY, body })
          if (res.status === 201) acked.add(res.body.id)
        } catch {
          return
        }
      }
    }),
  )
  while (acked.size < 200) await new Promise((r) => setTimeout(r, 5))
  await first.stop('SIGKILL')
  stop = true
  await load

  const second = await spawnMeterd(t, { dataDir })
  await whenReady(second.url)
  t.same(await answers(second.url), before, 'every answer over the seeded records is the same after the restart')

  // The records of the load: as many as the store holds (at least every acknowledged one), each once.
  const stored = await call(`${second.url}${API}/sources/metrics/ai/completions?from=${LOADED.from}&to=${LOADED.to}&size=1`, { key: ADMIN_KEY })
  const total = stored.body.page.totalElements
  t.ok(total >= acked.size, `${total} stored, ${acked.size} acknowledged`)
  const summary = (await get(second, ADMIN_KEY, 'summary', LOADED)).body.period
  t.same([summary.records, summary.cost], [total, String(total / 1000)], 'analytics counts each stored record once')

  // And a record after the restart counts once more.
  t.equal((await call(second.url + '/meter/v2/ai/completions', { key: ADMIN_KEY, body: completion({ requestTime: '2026-12-01T11:00:00.000Z', totalCost: 0.001 }) })).status, 201)
  t.equal((await get(second, ADMIN_KEY, 'summary', LOADED)).body.period.records, total + 1)
  await second.stop()
})
