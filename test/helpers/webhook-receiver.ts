/**
 * Helpers for the webhook tests (no tests here): a real HTTP receiver on 127.0.0.1 that
 * records every delivery as raw bytes, and a meterd configured to deliver to it.
 */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { startMeterd, type Meterd, type Teardown, ADMIN_KEY } from './meterd.js'
import type { ExportConfigurations } from '../../src/extensions/exportconfigs/index.js'
import type { DeliveryEngine } from '../../src/domain/webhooks/engine.js'

export interface Received {
  headers: IncomingHttpHeaders
  body: Buffer
  json: any
}

type Answer = { status: number; headers?: Record<string, string> }
export type Responder = (r: Received) => Answer | 'hang' | Promise<Answer>

export interface Receiver {
  url: string
  received: Received[]
  /** How to answer the next deliveries (default 200). */
  respond: Responder
  /** Waits (real time, bounded) until at least n deliveries arrived. */
  waitFor(n: number, timeoutMs?: number): Promise<Received[]>
  close(): Promise<void>
}

export async function startReceiver(t: Teardown, respond: Responder = () => ({ status: 200 }), port = 0): Promise<Receiver> {
  const hung: (() => void)[] = []
  const r: Receiver = {
    url: '',
    received: [],
    respond,
    async waitFor(n, timeoutMs = 5000) {
      const until = Date.now() + timeoutMs
      while (r.received.length < n) {
        if (Date.now() > until) throw new Error(`expected ${n} deliveries, got ${r.received.length}`)
        await new Promise((res) => setTimeout(res, 5))
      }
      return r.received
    },
    close: async () => {
      hung.forEach((f) => f())
      server.closeAllConnections()
      await new Promise<void>((res) => server.close(() => res()))
    },
  }
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', async () => {
      const body = Buffer.concat(chunks)
      let json: any
      try {
        json = JSON.parse(body.toString('utf8'))
      } catch {}
      const rec = { headers: req.headers, body, json }
      const pending = r.respond(rec)
      if (pending === 'hang') {
        hung.push(() => res.destroy())
        return
      }
      const answer = await pending
      r.received.push(rec)
      res.writeHead(answer.status, answer.headers ?? {})
      res.end()
    })
  })
  await new Promise<void>((res) => server.listen(port, '127.0.0.1', () => res()))
  r.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`
  t.teardown(() => r.close())
  return r
}

export const T0 = Date.parse('2025-06-01T00:00:00.000Z')
export const api = (m: Meterd) => `${m.url}/profitstream/v2/api/export-configurations`

/** A meterd on a frozen clock that may deliver to 127.0.0.1; tests drive the engine with settle(). */
export async function startWebhookMeterd(
  t: Teardown,
  opts: { exportconfigs?: Record<string, unknown>; frozen?: boolean; dataDir?: string } = {},
): Promise<{ m: Meterd; engine: DeliveryEngine; ext: ExportConfigurations }> {
  const m = await startMeterd(t, {
    dataDir: opts.dataDir,
    frozenNow: opts.frozen === false ? undefined : T0,
    config: {
      extensions: {
        apikeys: { bootstrap_key: ADMIN_KEY },
        exportconfigs: { allow_private_destinations: ['127.0.0.1'], poll_interval_ms: 3_600_000, ...(opts.exportconfigs ?? {}) },
      },
      // Rate limiting is tested elsewhere; on a frozen clock its 1-second windows never reset.
      service: { extensions: ['apikeys', 'exportconfigs'] },
    },
  })
  const ext = m.service.getExtension<ExportConfigurations>('exportconfigs')!
  return { m, engine: ext.engine!, ext }
}
