// A hostile or broken upstream, and careless upstream configs: the sidecar keeps its promises
// (nothing lost, nothing hammered, memory bounded, bad config refused at validate).
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import { DEFAULT_CONFIG_PATH } from '../../src/core/config/load.js'
import { completion } from '../fixtures/wire-examples.js'
import { meterd } from '../helpers/cli.js'
import { call, removeDir, startMeterd, tempDir, until, writeConfig, type Teardown } from '../helpers/meterd.js'

const USAGE = { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'], exporters: ['upstream'] }

function sidecarConfig(endpoint: string, extra: Record<string, unknown> = {}) {
  return {
    exporters: { upstream: { endpoint, api_key: 'hak_x_hostilehostilehostile', initial_backoff_ms: 300, max_backoff_ms: 2000, ...extra } },
    service: { pipelines: { usage: USAGE } },
  }
}

/** An upstream on 127.0.0.1 whose every answer `answer` writes itself; counts and records requests. */
async function upstream(t: Teardown, answer: (res: ServerResponse, body: any, n: number, req: IncomingMessage) => void) {
  const received: { at: number; url: string; body: any }[] = []
  const server = createServer((req, res) => {
    let text = ''
    req.on('data', (c) => (text += c))
    req.on('end', () => {
      const body = JSON.parse(text)
      received.push({ at: Date.now(), url: req.url!, body })
      answer(res, body, received.length, req)
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
  t.teardown(() => {
    server.closeAllConnections()
    return new Promise<void>((r) => server.close(() => r()))
  })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, received }
}

const ok = (res: ServerResponse, body: any) => {
  res.writeHead(201, { 'content-type': 'application/json' })
  res.end(JSON.stringify((Array.isArray(body) ? body : [body]).map(() => ({ id: 'x' }))))
}

async function metrics(url: string): Promise<string> {
  return (await call(`${url}/metrics`)).text
}

const drained = (url: string) => until('the queue to drain', async () => ((await metrics(url)).includes('meterd_upstream_queue_records{exporter="upstream"} 0') ? true : undefined))

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

t.test('a record routed to two pipelines that feed one upstream exporter is queued and counted once', async (t) => {
  // Counted once per pipeline, the queue looked fuller than it was and soon refused every request.
  const up = await upstream(t, ok)
  const side = await startMeterd(t, {
    config: {
      connectors: { routing: { match_once: false, table: [{ condition: 'true', pipelines: ['usage/a'] }, { condition: 'true', pipelines: ['usage/b'] }] } },
      exporters: { upstream: { endpoint: up.url, api_key: 'hak_x_hostilehostilehostile', max_queue_records: 3, initial_backoff_ms: 20 } },
      service: {
        pipelines: {
          usage: { receivers: ['metering', 'genai'], processors: ['validate'], exporters: ['routing'] },
          'usage/a': { receivers: ['routing'], exporters: ['upstream'] },
          'usage/b': { receivers: ['routing'], exporters: ['upstream'] },
        },
      },
    },
  })
  const key = await side.key()
  const sent: string[] = []
  for (let i = 0; i < 6; i++) {
    const batch = [completion(), completion()]
    t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body: batch })).status, 201, `request ${i} is accepted: the queue empties between them`)
    sent.push(...batch.map((b) => b.transactionId as string))
    await drained(side.url)
  }
  const got = up.received.flatMap((r) => (Array.isArray(r.body) ? r.body : [r.body]).map((b: any) => b.transactionId))
  t.same(got.sort(), sent.sort(), 'each record reached the upstream once')
  t.match(await metrics(side.url), /meterd_upstream_sent_records_total\{exporter="upstream"\} 12\n/)
})

t.test('a batch refused whole whose records are then throttled: the sidecar waits, it does not spin', async (t) => {
  // 413 for a batch, 429 + Retry-After for each single record: the one-by-one pass used to hand
  // back to the loop without a wait, which sent the batch again at once, ~600 requests a second.
  const up = await upstream(t, (res, body) => {
    res.writeHead(Array.isArray(body) ? 413 : 429, Array.isArray(body) ? {} : { 'retry-after': '1' })
    res.end('{}')
  })
  const side = await startMeterd(t, { config: sidecarConfig(up.url) })
  const key = await side.key()
  t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body: [completion(), completion()] })).status, 201)
  await sleep(1500)
  t.ok(up.received.length <= 6, `a few requests in 1.5 s, not a hot loop (${up.received.length})`)
  t.match(await metrics(side.url), /meterd_upstream_send_errors_total\{exporter="upstream",reason="retry"\} [1-9]/, 'the throttling is counted')
})

t.test('records a batch refusal finds one by one are counted when delivered and logged when refused', async (t) => {
  const up = await upstream(t, (res, body) => {
    if (Array.isArray(body)) return res.writeHead(400).end('{"error":{"code":"invalid_batch","message":"something in it"}}')
    if (body.model === 'refuse-me') return res.writeHead(422).end('{"error":{"code":"invalid_field","message":"model is refused"}}')
    ok(res, body)
  })
  const side = await startMeterd(t, { config: sidecarConfig(up.url) })
  const key = await side.key()
  t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body: [completion(), completion({ model: 'refuse-me' }), completion()] })).status, 201)
  await drained(side.url)
  const m = await metrics(side.url)
  t.match(m, /meterd_upstream_sent_records_total\{exporter="upstream"\} 2\n/, 'the two delivered records are counted as sent')
  t.match(m, /meterd_upstream_dead_letter_records\{exporter="upstream"\} 1\n/)
  t.match(m, /meterd_upstream_send_errors_total\{exporter="upstream",reason="refused"\} 2\n/, 'the batch refusal and the record refusal')
  const refused = side.logs.map((l) => JSON.parse(l)).filter((l) => l.msg === 'the upstream refused a record for good; it is kept in the dead letters')
  t.equal(refused.length, 1, 'the refused record is logged')
  t.match(refused[0], { status: 422, error: /model is refused/ })
})

t.test('Retry-After: 0 or a date in the past does not cut the backoff to nothing', async (t) => {
  // The upstream's Retry-After replaced the backoff, so `0` sent the batch again at once, forever.
  for (const retryAfter of ['0', new Date(Date.now() - 60_000).toUTCString()]) {
    await t.test(retryAfter, async (t) => {
      const up = await upstream(t, (res) => res.writeHead(503, { 'retry-after': retryAfter }).end('{}'))
      const side = await startMeterd(t, { config: sidecarConfig(up.url) })
      const key = await side.key()
      t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body: completion() })).status, 201)
      await sleep(1500)
      t.ok(up.received.length <= 6, `a few requests in 1.5 s with backoff from 300 ms (${up.received.length})`)
    })
  }
})

t.test('Retry-After as an HTTP date is honoured', async (t) => {
  const up = await upstream(t, (res, body, n) => {
    if (n > 1) return ok(res, body)
    res.writeHead(503, { 'retry-after': new Date(Date.now() + 3000).toUTCString() }).end('{}')
  })
  const side = await startMeterd(t, { config: sidecarConfig(up.url, { initial_backoff_ms: 50, max_backoff_ms: 10_000 }) })
  const key = await side.key()
  t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body: completion() })).status, 201)
  await drained(side.url)
  // The date has whole seconds: 3 s ahead is at least 2 s ahead.
  t.ok(up.received[1].at - up.received[0].at >= 1900, `the second attempt waited for the date (${up.received[1].at - up.received[0].at} ms)`)
})

t.test('an endless answer body neither fills the memory nor holds the queue', async (t) => {
  // The body was read whole: an upstream streaming without end grew the sidecar by ~250 MB a
  // second until the request timed out, and then again on every retry.
  const chunk = Buffer.alloc(1 << 20, 'x')
  for (const status of [201, 503]) {
    await t.test(`${status}`, async (t) => {
      const up = await upstream(t, (res, body, n) => {
        if (status !== 201 && n > 2) return ok(res, body)
        res.writeHead(status, { 'content-type': 'application/json' })
        const pump = () => {
          while (!res.destroyed && res.write(chunk));
          if (!res.destroyed) res.once('drain', pump)
        }
        pump()
      })
      const side = await startMeterd(t, { config: sidecarConfig(up.url, { timeout_ms: 5000, initial_backoff_ms: 20 }) })
      const key = await side.key()
      const rss = process.memoryUsage().rss
      let peak = rss
      const sample = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20)
      t.teardown(() => clearInterval(sample))
      const t0 = Date.now()
      t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body: completion() })).status, 201)
      await drained(side.url)
      t.ok(Date.now() - t0 < 2500, `delivered without waiting for the 5 s timeout (${Date.now() - t0} ms)`)
      t.ok(peak - rss < 150e6, `the memory stays bounded (+${Math.round((peak - rss) / 1e6)} MB)`)
    })
  }
})

t.test('an endpoint with a path: a proxy prefix is kept, an SDK-style /meter/v2 is not doubled', async (t) => {
  // The path was replaced: a gateway behind `https://proxy/meterd` got /meter/v2/... on the proxy's root.
  for (const [suffix, path] of [['/meterd/', '/meterd/meter/v2/ai/completions'], ['/meterd/meter/v2', '/meterd/meter/v2/ai/completions'], ['', '/meter/v2/ai/completions']]) {
    await t.test(suffix || 'bare origin', async (t) => {
      const up = await upstream(t, ok)
      const side = await startMeterd(t, { config: sidecarConfig(up.url + suffix) })
      const key = await side.key()
      t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body: completion() })).status, 201)
      await drained(side.url)
      t.same(up.received.map((r) => r.url), [path])
    })
  }
})

t.test('an upstream endpoint or delay the sender cannot use is refused by validate and run', async (t) => {
  const dir = tempDir('meterd-upstream-')
  t.teardown(() => removeDir(dir))
  const cases: [string, Record<string, unknown>, string, RegExp][] = [
    ['a port out of range', { endpoint: 'http://gateway:99999' }, 'endpoint', /is not a valid URL/],
    ['an unclosed IPv6 address', { endpoint: 'http://[::1' }, 'endpoint', /is not a valid URL/],
    ['credentials in the URL', { endpoint: 'https://user:secret@gateway' }, 'endpoint', /must not hold credentials/],
    ['a query', { endpoint: 'https://gateway/?team=a' }, 'endpoint', /must not hold a query/],
    // A Node timer longer than 2^31-1 ms fires at once: the sender would never wait.
    ['a backoff no timer can wait', { max_backoff_ms: 3_000_000_000 }, 'max_backoff_ms', /less or equal to 2147483647/],
    ['a timeout no timer can wait', { timeout_ms: 3_000_000_000 }, 'timeout_ms', /less or equal to 2147483647/],
  ]
  for (const [i, [what, over, path, message]] of cases.entries()) {
    const cfg = writeConfig(dir, sidecarConfig('http://gateway:8080', over), `case-${i}.yaml`)
    const v = await meterd(['validate', '--config', DEFAULT_CONFIG_PATH, '--config', cfg])
    t.equal(v.code, 78, `validate: ${what} → exit 78`)
    t.match(v.stderr, `  exporters.upstream.${path}: `, `names exporters.upstream.${path}`)
    t.match(v.stderr, message, what)
  }
  const r = await meterd(['run', '--config', DEFAULT_CONFIG_PATH, '--config', writeConfig(dir, sidecarConfig('http://gateway:99999'), 'run.yaml')], { env: { METERD_DATA_DIR: join(dir, 'data') } })
  t.equal(r.code, 78, 'run refuses it before listening')
})

t.test('the sender outlives a failed queue update (a full disk) and delivers the records later', async (t) => {
  // A rejected settle ended the sender's loop for good (an unhandled rejection): nothing was
  // forwarded again until a restart, while the queue filled up to 503s.
  const up = await upstream(t, ok)
  const side = await startMeterd(t, { config: sidecarConfig(up.url, { initial_backoff_ms: 50 }) })
  const key = await side.key()
  const root = side.service.store.root as unknown as { transaction: (...a: unknown[]) => Promise<unknown> }
  const transaction = root.transaction
  let failed = 0
  // The first write transaction after the upstream's answer (the sender's settle) fails to commit, as on a full disk.
  root.transaction = function (this: unknown, ...a: unknown[]) {
    if (up.received.length > 0 && failed === 0) {
      failed++
      root.transaction = transaction
      return Promise.reject(Object.assign(new Error('MDB_MAP_FULL: Environment mapsize limit reached'), { code: -30792 }))
    }
    return transaction.apply(this, a)
  }
  t.teardown(() => void (root.transaction = transaction))
  const body = completion()
  t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body })).status, 201)
  await drained(side.url)
  t.equal(failed, 1, 'the settle failed once')
  t.ok(up.received.length >= 2, 'the record was sent again after the failed update')
  t.ok(up.received.every((r) => r.body.transactionId === body.transactionId), 'under its transactionId, which the upstream dedups on')
  const warned = side.logs.map((l) => JSON.parse(l)).find((l) => l.msg === 'upstream send failed; retrying')
  t.match(warned, { error: /local queue could not be updated/ }, 'the failure is logged')
})

t.test('a request of more records than max_queue_records is taken by an empty queue, not refused for ever', async (t) => {
  // It was answered 503 + Retry-After however empty the queue: the client's retries could never succeed.
  let up = false
  const server = await upstream(t, (res, body) => (up ? ok(res, body) : res.writeHead(503).end('{}')))
  const side = await startMeterd(t, { config: sidecarConfig(server.url, { max_queue_records: 2, initial_backoff_ms: 20, max_backoff_ms: 100 }) })
  const key = await side.key()
  const big = [completion(), completion(), completion()]
  t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body: big })).status, 201, 'the empty queue takes it')
  const next = await call(`${side.url}/meter/v2/ai/completions`, { key, body: completion() })
  t.equal(next.status, 503, 'then the queue is full')
  t.ok(Number(next.headers.get('retry-after')) >= 1)
  up = true
  await drained(side.url)
  const got = server.received.filter((r) => Array.isArray(r.body)).flatMap((r) => r.body.map((b: any) => b.transactionId))
  t.same([...new Set(got)].sort(), big.map((b) => b.transactionId).sort(), 'and forwards it')
})

t.test('a redirect is not followed but said where to: the records wait for the endpoint to be fixed', async (t) => {
  const up = await upstream(t, (res) => res.writeHead(308, { location: 'https://gateway.example/meter/v2/ai/completions' }).end())
  const side = await startMeterd(t, { config: sidecarConfig(up.url, { initial_backoff_ms: 20 }) })
  const key = await side.key()
  t.equal((await call(`${side.url}/meter/v2/ai/completions`, { key, body: completion() })).status, 201)
  const warned = await until('the warning', async () => side.logs.map((l) => JSON.parse(l)).find((l) => l.msg === 'upstream send failed; retrying'))
  t.match(warned, { status: 308, error: /redirect to https:\/\/gateway\.example\/meter\/v2\/ai\/completions, not followed/ })
  t.match(await metrics(side.url), /meterd_upstream_queue_records\{exporter="upstream"\} 1\n/, 'the record stays queued')
})

t.test('records left in the queue of an exporter renamed away are reported at start, and sent once it is back', async (t) => {
  // Renaming `upstream` to `upstream/gw` stranded what `upstream` had acknowledged, without a word.
  const dataDir = join(tempDir(), 'data')
  const down = await upstream(t, (res) => res.writeHead(503).end('{}'))
  const first = await startMeterd(t, { dataDir, config: sidecarConfig(down.url) })
  const key = await first.key()
  const body = completion()
  t.equal((await call(`${first.url}/meter/v2/ai/completions`, { key, body })).status, 201)
  await first.close()

  const up = await upstream(t, ok)
  const renamed = sidecarConfig(up.url, { initial_backoff_ms: 20 }) as any
  renamed.exporters = { 'upstream/gw': renamed.exporters.upstream }
  renamed.service.pipelines.usage = { ...USAGE, exporters: ['upstream/gw'] }
  const second = await startMeterd(t, { dataDir, config: renamed })
  const warned = second.logs.map((l) => JSON.parse(l)).find((l) => l.queue === 'upstream-queue:upstream')
  t.match(warned, { level: 40, records: 1, msg: /exporter "upstream" is no longer configured/ }, 'the stranded record is reported')
  await second.close()

  const third = await startMeterd(t, { dataDir, config: sidecarConfig(up.url, { initial_backoff_ms: 20 }) })
  await drained(third.url)
  t.ok(up.received.some((r) => r.body.transactionId === body.transactionId), 'configured again, the exporter sends it')
  t.notOk(third.logs.some((l) => l.includes('no longer configured')), 'and nothing is reported then')
})
