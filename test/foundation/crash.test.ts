import t from 'tap'
import { ADMIN_KEY, call, compareStored, removeDir, spawnMeterd, storedCompletions, tempDir } from '../helpers/meterd.js'
import { completion } from '../fixtures/wire-examples.js'

const C = '/meter/v2/ai/completions'

/** Posts unique completions from `workers` loops until the daemon stops answering. */
async function load(url: string, workers: number, acked: Map<string, string>): Promise<void> {
  await Promise.all(
    Array.from({ length: workers }, async () => {
      for (;;) {
        const body = completion()
        try {
          const res = await call(url + C, { key: ADMIN_KEY, body })
          if (res.status === 201) acked.set(body.transactionId as string, res.body.id)
        } catch {
          return // connection refused or reset: the daemon is gone
        }
      }
    }),
  )
}

t.test('SIGKILL under concurrent load loses no acknowledged record and duplicates none', async (t) => {
  const dataDir = tempDir('meterd-crash-')
  t.teardown(() => removeDir(dataDir))
  const first = await spawnMeterd(t, { dataDir })
  const acked = new Map<string, string>()
  const running = load(first.url, 16, acked)
  // Kill once a good number of records are acknowledged, with requests in flight.
  const until = Date.now() + 20_000
  while (acked.size < 400 && Date.now() < until) await new Promise((r) => setTimeout(r, 10))
  await first.stop('SIGKILL')
  await running
  t.ok(acked.size >= 400, `${acked.size} records acknowledged before the kill`)

  const second = await spawnMeterd(t, { dataDir })
  const stored = await storedCompletions(second.url)
  const { missing, wrongId } = compareStored(stored, acked)
  t.equal(missing, 0, 'every acknowledged record is present after restart')
  t.equal(wrongId, 0, 'exactly once, under the id that was acknowledged')
  t.ok([...stored.values()].every((ids) => ids.length === 1), 'no transactionId is stored twice')

  // The dedup table survived too: a client retry of an acknowledged record is not stored again.
  const [tx, id] = [...acked][0]
  const retry = await call(second.url + C, { key: ADMIN_KEY, body: completion({ transactionId: tx }) })
  t.equal(retry.body.id, id, 'a retry after the crash gets the original id')
  await second.stop()
})

t.test('SIGTERM drains: in-flight requests are answered and the process exits 0', async (t) => {
  const dataDir = tempDir('meterd-drain-')
  t.teardown(() => removeDir(dataDir))
  const d = await spawnMeterd(t, { dataDir })
  const bodies = Array.from({ length: 50 }, () => completion())
  const pending = bodies.map((body) => call(d.url + C, { key: ADMIN_KEY, body }).catch(() => undefined))
  await new Promise((r) => setTimeout(r, 5))
  const code = await d.stop('SIGTERM')
  const answers = await Promise.all(pending)
  t.equal(code, 0, 'clean exit')
  const ok = answers.filter((a) => a?.status === 201).length
  t.ok(answers.every((a) => a === undefined || a.status === 201), 'nothing answered with an error while draining')

  const again = await spawnMeterd(t, { dataDir })
  const stored = await storedCompletions(again.url)
  const acknowledged = bodies.filter((_, i) => answers[i]?.status === 201)
  t.ok(acknowledged.every((b) => stored.has(b.transactionId as string)), `all ${ok} acknowledged records stored`)
  await again.stop()
})
