import t from 'tap'
import { ADMIN_KEY, call, removeDir, spawnMeterd, tempDir } from '../helpers/meterd.js'
import { jsonSpans } from '../helpers/otlp.js'

const LIST = '/profitstream/v2/api/sources/metrics/ai/completions'

async function storedByTransaction(url: string): Promise<Map<string, number>> {
  const out = new Map<string, number>()
  for (let page = 0; ; page++) {
    const res = await call(`${url}${LIST}?size=1000&page=${page}`, { key: ADMIN_KEY })
    for (const r of res.body._embedded.aICompletionMetricResourceList) out.set(r.transactionId, (out.get(r.transactionId) ?? 0) + 1)
    if (page + 1 >= res.body.page.totalPages) break
  }
  return out
}

let seq = 0
/** An OTLP/JSON export of `n` GenAI spans, each with its own response id. */
function exportOf(n: number): { body: unknown; ids: string[] } {
  const ids: string[] = []
  const spans = Array.from({ length: n }, () => {
    const id = `chatcmpl-crash-${process.pid}-${seq++}`
    ids.push(id)
    return {
      traceId: (seq.toString(16).padStart(8, '0') + 'a'.repeat(24)).slice(0, 32),
      spanId: seq.toString(16).padStart(16, '0'),
      name: 'chat gpt-4o-mini',
      startTimeUnixNano: '1795305494866000000',
      endTimeUnixNano: '1795305495866000000',
      attributes: [
        { key: 'gen_ai.operation.name', value: { stringValue: 'chat' } },
        { key: 'gen_ai.provider.name', value: { stringValue: 'openai' } },
        { key: 'gen_ai.request.model', value: { stringValue: 'gpt-4o-mini' } },
        { key: 'gen_ai.response.id', value: { stringValue: id } },
        { key: 'gen_ai.usage.input_tokens', value: { intValue: 12 } },
        { key: 'gen_ai.usage.output_tokens', value: { intValue: '5' } },
      ],
    }
  })
  return { body: jsonSpans(spans), ids }
}

t.test('SIGKILL during an OTLP load: every record of an export answered 200 is stored exactly once; retries store nothing twice', async (t) => {
  const dataDir = tempDir('meterd-otlp-crash-')
  t.teardown(() => removeDir(dataDir))
  const first = await spawnMeterd(t, { dataDir })
  const acked: string[] = []
  const unanswered: { body: unknown; ids: string[] }[] = []
  const running = Promise.all(
    Array.from({ length: 8 }, async () => {
      for (;;) {
        const e = exportOf(10)
        try {
          const res = await call(`${first.url}/meter/v2/otlp/v1/traces`, { key: ADMIN_KEY, body: e.body })
          if (res.status === 200) acked.push(...e.ids)
          else unanswered.push(e)
        } catch {
          unanswered.push(e)
          return
        }
      }
    }),
  )
  const until = Date.now() + 20_000
  while (acked.length < 400 && Date.now() < until) await new Promise((r) => setTimeout(r, 10))
  await first.stop('SIGKILL')
  await running
  t.ok(acked.length >= 400, `${acked.length} records acknowledged before the kill`)

  const second = await spawnMeterd(t, { dataDir })
  const stored = await storedByTransaction(second.url)
  t.equal(acked.filter((id) => stored.get(id) !== 1).length, 0, 'every acknowledged record stored, once')
  // The exporter retries what it had no answer for: those land once too, and the acknowledged ones stay once.
  for (const e of unanswered) t.equal((await call(`${second.url}/meter/v2/otlp/v1/traces`, { key: ADMIN_KEY, body: e.body })).status, 200)
  const after = await storedByTransaction(second.url)
  t.ok([...after.values()].every((n) => n === 1), 'no transactionId stored twice after the retries')
  t.ok(unanswered.flatMap((e) => e.ids).every((id) => after.get(id) === 1), 'the retried exports are all stored')
  await second.stop()
})
