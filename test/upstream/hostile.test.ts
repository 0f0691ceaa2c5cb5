// A hostile or broken upstream, and careless upstream configs: the sidecar keeps its promises
// (nothing lost, nothing hammered, memory bounded, bad config refused at validate).
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
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
