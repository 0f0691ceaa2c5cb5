import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import { DEFAULT_CONFIG_PATH } from '../../src/core/config/load.js'
import { completion, goVideo, toolEvent } from '../fixtures/wire-examples.js'
import { call, freePort, spawnMeterd, startMeterd, tempDir, writeConfig, type Meterd, type Teardown, slowProxy, until } from '../helpers/meterd.js'

const LIST = '/profitstream/v2/api/sources/metrics'

/** A sidecar whose usage pipeline only forwards to `endpoint`. */
function sidecarConfig(endpoint: string, apiKey: string, extra: Record<string, unknown> = {}) {
  return {
    exporters: { upstream: { endpoint, api_key: apiKey, initial_backoff_ms: 20, max_backoff_ms: 200, ...extra } },
    service: { pipelines: { usage: { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'], exporters: ['upstream'] } } },
  }
}

/** Every transactionId the upstream stored, with how many records carry it. */
async function stored(url: string, key: string): Promise<Map<string, number>> {
  const out = new Map<string, number>()
  for (const path of ['ai/completions', 'tool/events', 'ai/video']) {
    const res = await call(`${url}${LIST}/${path}?size=1000`, { key })
    for (const list of Object.values(res.body._embedded) as any[]) for (const r of list) out.set(r.transactionId, (out.get(r.transactionId) ?? 0) + 1)
  }
  return out
}

const total = (m: Map<string, number>) => [...m.values()].reduce((a, b) => a + b, 0)

async function startUpstream(t: Teardown, port?: number): Promise<{ m: Meterd; key: string }> {
  const m = await startMeterd(t, port ? { config: { server: { endpoint: `127.0.0.1:${port}` } } } : {})
  return { m, key: await m.key({ team: 'gateway-team', account: 'gw' }) }
}

t.test('a sidecar answers 201 once a record is queued and the upstream stores each record once', async (t) => {
  const up = await startUpstream(t)
  const side = await startMeterd(t, { config: sidecarConfig(up.m.url, up.key) })
  const key = await side.key()
  const sent: string[] = []
  for (let i = 0; i < 5; i++) {
    const body = completion()
    sent.push(body.transactionId as string)
    t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body })).status, 201)
  }
  const batch = [completion(), completion()]
  sent.push(...batch.map((b) => b.transactionId as string))
  t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body: batch })).status, 201)
  const tool = toolEvent()
  sent.push(tool.transactionId as string)
  t.equal((await call(`${side.url}/meter/v2/tool/events`, { key, body: tool })).status, 201)
  t.equal((await call(`${side.url}/meter/v2/ai/video`, { key, body: goVideo })).status, 201)
  sent.push(goVideo.transactionId)
  const got = await until('the upstream to store 9 records', async () => {
    const s = await stored(up.m.url, up.key)
    return total(s) >= 9 ? s : undefined
  })
  t.same([...got.keys()].sort(), [...sent].sort(), 'every record, under its transactionId')
  t.ok([...got.values()].every((n) => n === 1), 'each once')
  // The upstream stores before the sidecar hears its answer: wait for the acknowledgement.
  const metrics = await until('the sidecar to settle', async () => {
    const res = await call(`${side.url}/metrics`)
    return res.text.includes('meterd_upstream_queue_records{exporter="upstream"} 0') ? res : undefined
  })
  t.match(metrics.text, /meterd_upstream_sent_records_total\{exporter="upstream"\} 9/)
})

t.test('upstream down for a while: records wait in the queue and arrive once, those without a transactionId too', async (t) => {
  const port = await freePort()
  const upKey = 'hak_gw_upstreamupstreamupstream0001'
  const side = await startMeterd(t, { config: sidecarConfig(`http://127.0.0.1:${port}`, upKey) })
  const key = await side.key()
  const withId = completion()
  const withoutId = completion()
  delete withoutId.transactionId
  for (const body of [withId, withoutId]) t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body })).status, 201)
  await new Promise((r) => setTimeout(r, 300)) // several failed sends
  t.match((await call(`${side.url}/metrics`)).text, /meterd_upstream_queue_records\{exporter="upstream"\} 2/)
  t.match((await call(`${side.url}/metrics`)).text, /meterd_upstream_send_errors_total\{exporter="upstream",reason="retry"\} [1-9]/)

  const up = await startMeterd(t, { config: { server: { endpoint: `127.0.0.1:${port}` }, extensions: { apikeys: { bootstrap_key: upKey } } } })
  const got = await until('both records upstream', async () => {
    const s = await stored(up.url, upKey)
    return total(s) >= 2 ? s : undefined
  })
  t.equal(got.get(withId.transactionId as string), 1)
  const generated = [...got.keys()].filter((k) => k.startsWith('meterd-'))
  t.equal(generated.length, 1, 'the record without a transactionId got the sidecar record id as one')
  await new Promise((r) => setTimeout(r, 300))
  t.equal(total(await stored(up.url, upKey)), 2, 'nothing arrives twice')
  const said = side.logs.map((l) => JSON.parse(l)).filter((l) => l.component === 'upstream')
  t.ok(said.some((l) => l.msg === 'upstream send failed; retrying'), 'the failure is logged')
  const back = said.find((l) => l.msg === 'upstream reachable again; sending the queue')
  t.ok(back && back.failedSends > 0, 'and so is the recovery, with the failed sends counted')
})

t.test('a full queue answers 503 with Retry-After and drops nothing', async (t) => {
  const port = await freePort()
  const side = await startMeterd(t, { config: sidecarConfig(`http://127.0.0.1:${port}`, 'hak_x_nobodylistensnobodylistens', { max_queue_records: 3 }) })
  const key = await side.key()
  for (let i = 0; i < 3; i++) t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body: completion() })).status, 201)
  const full = await call(`${side.url}/meter/v2/ai/completions`, { key, body: completion() })
  t.equal(full.status, 503)
  t.ok(Number(full.headers.get('retry-after')) >= 1, 'with Retry-After')
  t.equal(full.body.error.type, 'api_error')
  t.match((await call(`${side.url}/metrics`)).text, /meterd_upstream_queue_records\{exporter="upstream"\} 3/)
  for (let i = 0; i < 5; i++) t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body: completion() })).status, 503)
  // The state is logged once when it begins, not once per refused request (with a stack each).
  const lines = side.logs.map((l) => JSON.parse(l))
  t.equal(lines.filter((l) => l.msg?.startsWith('upstream queue full')).length, 1, 'one warning for the episode')
  t.equal(lines.filter((l) => l.msg === 'request failed').length, 0, 'no error line per refused request')
})

t.test('a full queue beside the lmdb exporter: the refused record is stored nowhere, and its retry reaches the upstream', async (t) => {
  // The record must not be kept by the lmdb branch while the upstream branch refuses it: the
  // client's retry would then be answered from dedup and the upstream would never get it.
  for (const exporters of [['lmdb', 'upstream'], ['upstream', 'lmdb']]) {
    await t.test(exporters.join(', '), async (t) => {
      let up = false
      const upstream = await scripted(t, (body) => {
        if (!up) return { status: 503, headers: { 'retry-after': '1' }, body: { error: { code: 'unavailable' } } }
        return { status: 201, body: (Array.isArray(body) ? body : [body]).map(() => ({ id: 'x' })) }
      })
      const config = sidecarConfig(upstream.url, 'hak_x_scriptedscriptedscripted', { max_queue_records: 2 })
      config.service.pipelines.usage.exporters = exporters
      const side = await startMeterd(t, { config })
      const key = await side.key()
      for (let i = 0; i < 2; i++) t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body: completion() })).status, 201)
      const refused = completion()
      const full = await call(`${side.url}/meter/v2/ai/completions`, { key, body: refused })
      t.equal(full.status, 503, 'the queue is full')
      const local = await call(`${side.url}${LIST}/ai/completions?transactionId=${refused.transactionId}`, { key })
      t.equal(local.status, 200)
      t.same(Object.values(local.body._embedded ?? {}).flat(), [], 'and the lmdb branch did not store it either')
      up = true
      await until('the queue to drain', async () => ((await call(`${side.url}/metrics`)).text.includes('meterd_upstream_queue_records{exporter="upstream"} 0') ? true : undefined))
      t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body: refused })).status, 201, 'the retry is stored')
      await until('the upstream to get the retried record', async () =>
        upstream.received.some((r) => (Array.isArray(r.body) ? r.body : [r.body]).some((x: any) => x.transactionId === refused.transactionId)) ? true : undefined,
      )
      const again = await call(`${side.url}${LIST}/ai/completions?transactionId=${refused.transactionId}`, { key })
      t.equal(Object.values(again.body._embedded).flat().length, 1, 'stored once locally')
    })
  }
})

/** A stand-in upstream that answers by a script, recording what it received. */
async function scripted(t: Teardown, answer: (body: any, n: number) => { status: number; body?: unknown; headers?: Record<string, string> }) {
  const received: { at: number; body: any }[] = []
  const server: Server = createServer((req, res) => {
    let text = ''
    req.on('data', (c) => (text += c))
    req.on('end', () => {
      const body = JSON.parse(text)
      received.push({ at: Date.now(), body })
      const a = answer(body, received.length)
      res.writeHead(a.status, { 'content-type': 'application/json', ...(a.headers ?? {}) })
      res.end(JSON.stringify(a.body ?? {}))
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
  t.teardown(() => new Promise<void>((r) => server.close(() => r())))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, received }
}

t.test('a record the upstream refuses goes to the dead letters; the rest of its batch is delivered; Retry-After is honoured', async (t) => {
  let refusedOnce = false
  const up = await scripted(t, (body, n) => {
    if (n === 1) return { status: 503, headers: { 'retry-after': '1' }, body: { error: { code: 'unavailable' } } }
    const list = Array.isArray(body) ? body : [body]
    const bad = list.findIndex((r: any) => r.model === 'refuse-me')
    if (bad >= 0 && !refusedOnce) {
      if (list.length === 1) refusedOnce = true
      return { status: 400, body: { error: { code: 'invalid_field', message: 'model is refused', param: Array.isArray(body) ? `[${bad}].model` : 'model' } } }
    }
    return { status: 201, body: list.map(() => ({ id: 'x' })) }
  })
  const side = await startMeterd(t, { config: sidecarConfig(up.url, 'hak_scripted_scriptedscriptedscripted', { max_backoff_ms: 5000 }) })
  const key = await side.key()
  const batch = [completion(), completion({ model: 'refuse-me' }), completion()]
  t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body: batch })).status, 201)
  await until('the queue to drain', async () => ((await call(`${side.url}/metrics`)).text.includes('meterd_upstream_queue_records{exporter="upstream"} 0') ? true : undefined))
  t.ok(up.received[1].at - up.received[0].at >= 950, 'the second attempt waited for Retry-After: 1')
  const metrics = (await call(`${side.url}/metrics`)).text
  t.match(metrics, /meterd_upstream_dead_letter_records\{exporter="upstream"\} 1/)
  t.match(metrics, /meterd_upstream_sent_records_total\{exporter="upstream"\} 2/)
  const delivered = up.received.filter((r) => Array.isArray(r.body) && r.body.length === 2).flatMap((r) => r.body.map((b: any) => b.transactionId))
  t.same(delivered.sort(), [batch[0].transactionId, batch[2].transactionId].sort(), 'the two good records in one request')
})

t.test('kill -9 of the sidecar while its batch is at the upstream: after restart every acknowledged record is stored exactly once', async (t) => {
  const up = await startUpstream(t)
  // A slow link: requests reach the upstream (which stores them) but the answers come late.
  let forwarded = 0
  const proxyUrl = await slowProxy(t, up.m.url, () => forwarded++)

  const dir = tempDir()
  const dataDir = join(dir, 'data')
  const cfg = writeConfig(dir, sidecarConfig(proxyUrl, up.key, { batch_size: 20 }))
  const first = await spawnMeterd(t, { dataDir, configFiles: [DEFAULT_CONFIG_PATH, cfg] })
  const { ADMIN_KEY } = await import('../helpers/meterd.js')
  const acked: string[] = []
  for (let i = 0; i < 10; i++) {
    const batch = Array.from({ length: 10 }, () => completion())
    const res = await call(`${first.url}/meter/v2/ai/completions`, { key: ADMIN_KEY, body: batch })
    t.equal(res.status, 201)
    acked.push(...batch.map((b) => b.transactionId as string))
  }
  await until('a batch to reach the upstream', async () => (forwarded > 0 ? true : undefined))
  await first.stop('SIGKILL')
  const before = total(await stored(up.m.url, up.key))
  t.ok(before < acked.length, `the sidecar died with records still queued (${before} of ${acked.length} upstream)`)
  const second = await spawnMeterd(t, { dataDir, configFiles: [DEFAULT_CONFIG_PATH, cfg] })
  const got = await until('every acknowledged record upstream', async () => {
    const s = await stored(up.m.url, up.key)
    return total(s) >= acked.length ? s : undefined
  }, 30_000)
  t.same([...got.keys()].sort(), [...acked].sort(), 'every acknowledged record')
  t.ok([...got.values()].every((n) => n === 1), 'each exactly once, although a batch was sent twice')
  await second.stop()
})

t.test("an upstream whose max_batch_items is below batch_size: the sidecar sends smaller batches, each record stored once, and says so once", async (t) => {
  const up = await startMeterd(t, { config: { receivers: { metering: { max_batch_items: 7 } } } })
  const upKey = await up.key({ team: 'gateway-team', account: 'gw' })
  // A real proxy in front of the gateway counts the records of each request and the answer to it.
  const { createServer, request } = await import('node:http')
  const requests: { records: number; status: number; body: string }[] = []
  const proxy = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      const body = Buffer.concat(chunks)
      const parsed = JSON.parse(body.toString())
      const out = request(new URL(req.url!, up.url), { method: req.method, headers: req.headers }, (r) => {
        const answer: Buffer[] = []
        r.on('data', (c) => answer.push(c))
        r.on('end', () => {
          requests.push({ records: Array.isArray(parsed) ? parsed.length : 1, status: r.statusCode!, body: Buffer.concat(answer).toString() })
          res.writeHead(r.statusCode!, r.headers)
          res.end(Buffer.concat(answer))
        })
      })
      out.end(body)
    })
  })
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', () => r()))
  t.teardown(() => new Promise<void>((r) => (proxy.closeAllConnections(), proxy.close(() => r()))))
  const proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`

  const side = await startMeterd(t, { config: sidecarConfig(proxyUrl, upKey, { batch_size: 50 }) })
  const key = await side.key()
  // 200 records queued at once (the sidecar's own receiver takes up to 1000 per request).
  const batch = Array.from({ length: 200 }, () => completion())
  t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body: batch })).status, 201)
  const sent = batch.map((b) => b.transactionId as string)
  await until('the queue to drain', async () => ((await call(`${side.url}/metrics`)).text.includes('meterd_upstream_queue_records{exporter="upstream"} 0') ? true : undefined))

  const got = await stored(up.url, upKey)
  t.equal(total(got), 200, 'all 200 records upstream')
  t.same([...got.keys()].sort(), [...sent].sort(), 'each under its transactionId')
  t.ok([...got.values()].every((n) => n === 1), 'each once')

  const refused = requests.filter((r) => r.status === 413)
  t.ok(refused.length >= 1, 'the gateway refused the first batch of 50')
  t.match(JSON.parse(refused[0].body).error, { code: 'batch_too_large', max_batch_items: 7 }, 'saying its limit in a field')
  const stored2xx = requests.filter((r) => r.status === 201)
  t.equal(stored2xx.reduce((n, r) => n + r.records, 0), 200, 'the accepted requests carried the 200 records, none twice')
  t.ok(stored2xx.every((r) => r.records <= 7), `every accepted request holds at most 7 records (${stored2xx.map((r) => r.records).join(',')})`)
  t.equal(refused.length, 1, 'one refused request: the size is not probed again')
  t.equal(requests.length, 1 + Math.ceil(200 / 7), 'and then 29 requests of 7, not 200 of one')

  const metrics = (await call(`${side.url}/metrics`)).text
  t.match(metrics, /meterd_upstream_batch_size\{exporter="upstream"\} 7\n/, 'the effective batch size is a metric')
  t.match(metrics, /meterd_upstream_sent_records_total\{exporter="upstream"\} 200\n/)
  t.match(metrics, /meterd_upstream_dead_letter_records\{exporter="upstream"\} 0\n/, 'nothing dead-lettered')
  t.match(metrics, /meterd_upstream_send_errors_total\{exporter="upstream",reason="batch_too_large"\} 1\n/)
  const warnings = side.logs.map((l) => JSON.parse(l)).filter((l) => l.batchSize !== undefined && l.newBatchSize !== undefined)
  t.equal(warnings.length, 1, 'one warning')
  t.match(warnings[0], { level: 40, batchSize: 50, newBatchSize: 7, upstreamMaxBatchItems: 7, msg: /raise the upstream's max_batch_items or set batch_size to 7/ })
})

t.test('an upstream that says batch_too_large without its limit: the batch size halves until the batches pass', async (t) => {
  const up = await scripted(t, (body) => {
    const list = Array.isArray(body) ? body : [body]
    if (list.length > 5) return { status: 413, body: { error: { type: 'invalid_request_error', code: 'batch_too_large', message: 'too many' } } }
    return { status: 201, body: list.map(() => ({ id: 'x' })) }
  })
  const side = await startMeterd(t, { config: sidecarConfig(up.url, 'hak_scripted_scriptedscriptedscripted', { batch_size: 20 }) })
  const key = await side.key()
  const batch = Array.from({ length: 20 }, () => completion())
  t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body: batch })).status, 201)
  await until('the queue to drain', async () => ((await call(`${side.url}/metrics`)).text.includes('meterd_upstream_queue_records{exporter="upstream"} 0') ? true : undefined))
  t.same(up.received.map((r) => (Array.isArray(r.body) ? r.body.length : 1)), [20, 10, 5, 5, 5, 5], '20 → 10 → 5 records per request')
  const delivered = up.received.filter((r) => Array.isArray(r.body) && r.body.length <= 5).flatMap((r) => r.body.map((b: any) => b.transactionId))
  t.same(delivered.sort(), batch.map((b) => b.transactionId).sort(), 'every record delivered once')
  const metrics = (await call(`${side.url}/metrics`)).text
  t.match(metrics, /meterd_upstream_batch_size\{exporter="upstream"\} 5\n/)
  t.match(metrics, /meterd_upstream_dead_letter_records\{exporter="upstream"\} 0\n/)
})
