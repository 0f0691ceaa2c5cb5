/**
 * Two-worker daemons for the tests of server.workers (test/cluster/workers.test.ts and
 * kill-under-load.test.ts): a daemon of two worker processes, and one request on a connection of
 * its own.
 */
import { request } from 'node:http'
import type { Test } from 'tap'
import { ADMIN_KEY, removeDir, spawnMeterd, tempDir, writeConfig, workerPids, type ChildMeterd } from './meterd.js'

export interface Answer {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: any
}

/** One request on a new connection (no keep-alive pool), JSON in and out. */
export function send(base: string, path: string, opts: { method?: string; body?: unknown; headers?: Record<string, string>; timeoutMs?: number } = {}): Promise<Answer> {
  const url = new URL(path, base)
  const payload = opts.body === undefined ? undefined : JSON.stringify(opts.body)
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        agent: false,
        method: opts.method ?? (payload ? 'POST' : 'GET'),
        headers: { 'x-api-key': ADMIN_KEY, ...(payload ? { 'content-type': 'application/json' } : {}), ...opts.headers },
      },
      (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c) => chunks.push(c))
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8')
          let body: any
          try {
            body = text ? JSON.parse(text) : undefined
          } catch {
            body = text
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body })
        })
      },
    )
    req.on('error', reject)
    if (opts.timeoutMs) req.setTimeout(opts.timeoutMs, () => req.destroy(new Error('timed out')))
    req.end(payload)
  })
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))


export async function twoWorkers(t: Test, overrides: Record<string, unknown>): Promise<ChildMeterd> {
  const dir = tempDir('meterd-workers-')
  t.teardown(() => removeDir(dir))
  const cfg = writeConfig(dir, overrides)
  const d = await spawnMeterd(t, {
    dataDir: `${dir}/data`,
    configFiles: [new URL('../../config/meterd.yaml', import.meta.url).pathname, cfg],
    env: { METERD_WORKERS: '2', METERD_LOG_LEVEL: 'info' }, // info: the supervisor's "every worker is ready"
    readyTimeoutMs: 60_000, // two processes start one after the other
  })
  // Both workers listen once the supervisor says so (docs/deployment.md); until then the first may
  // be the only one, and with it killed no worker would hold the listeners.
  for (let i = 0; i < 1200 && !d.stdout.join('').includes('every worker is ready'); i++) await sleep(50)
  t.equal(workerPids(d).length, 2, 'two worker processes')
  return d
}
