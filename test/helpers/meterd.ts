/**
 * Test harness: a real meterd (in-process Service or child process) on 127.0.0.1 with
 * a fresh LMDB directory, plus key creation and small HTTP helpers.
 */
import { execFileSync, type ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { stringify } from 'yaml'
import { FACTORIES } from '../../src/components.js'
import { DEFAULT_CONFIG_PATH, deepMerge } from '../../src/core/config/load.js'
import { resolveConfig } from '../../src/host/resolve.js'
import { factoryMap } from '../../src/host/graph.js'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { Service } from '../../src/host/service.js'
import { createTelemetry } from '../../src/core/telemetry.js'
import { KeyStore } from '../../src/extensions/apikeys/key-store.js'
import type { Scope } from '../../src/transport/http/server.js'
import { freePort } from './net.js'
import { spawnBound } from './orphans.js'

export { freePort }

export interface Teardown {
  teardown(fn: () => unknown): void
}

export const ADMIN_KEY = 'hak_default_adminadminadminadminadmin01'

export function tempDir(prefix = 'meterd-test-'): string {
  return mkdtempSync(join(tmpdir(), prefix))
}

/** Writes a YAML config file (merged over the embedded default) and returns its path. */
export function writeConfig(dir: string, overrides: Record<string, unknown>, name = 'test.yaml'): string {
  const path = join(dir, name)
  writeFileSync(path, stringify(overrides))
  return path
}

export interface Meterd {
  url: string
  service: Service
  dataDir: string
  /** Captured pino output (one JSON object per line). */
  logs: string[]
  /**
   * A new key with the given scopes (default: metering + analytics + platform), of team `team-a`
   * in account `acct-1` unless told; a key of another account defaults to a team of its own (a
   * team belongs to one account).
   */
  key(opts?: { team?: string; account?: string; scopes?: Scope[]; tenant?: string; environment?: string }): Promise<string>
  /** The clock the service sees; tests move it with `advance`. */
  clock: { now: number; advance(ms: number): void }
  close(): Promise<void>
}

export interface StartOptions {
  /** Config merged over the embedded default (deep merge; lists replaced). */
  config?: Record<string, unknown>
  /** Start the clock at this time and freeze it (tests advance it explicitly). */
  frozenNow?: number
  dataDir?: string
}

/** Starts a Service in this process on a free port with a fresh data directory. */
export async function startMeterd(t: Teardown, opts: StartOptions = {}): Promise<Meterd> {
  const dir = tempDir()
  const dataDir = opts.dataDir ?? join(dir, 'data')
  const base = {
    server: { endpoint: '127.0.0.1:0', shutdown_timeout_ms: 2000 },
    storage: { path: dataDir },
    // Tests run side by side: the OTLP listeners take free ports too.
    receivers: { otlp: { grpc: { endpoint: '127.0.0.1:0' }, http: { endpoint: '127.0.0.1:0' } } },
    extensions: { apikeys: { bootstrap_key: ADMIN_KEY } },
  }
  const override = writeConfig(dir, deepMerge(base, (opts.config ?? {}) as never) as Record<string, unknown>)
  const resolved = resolveConfig([DEFAULT_CONFIG_PATH, override], factoryMap(FACTORIES), {})
  if (resolved.issues.length) throw new Error('test config invalid: ' + JSON.stringify(resolved.issues))
  const logs: string[] = []
  const destination = new Writable({
    write(chunk, _enc, cb) {
      logs.push(...String(chunk).split('\n').filter(Boolean))
      cb()
    },
  })
  const telemetry = createTelemetry({ level: 'info', destination })
  const clock = {
    now: opts.frozenNow ?? 0,
    advance(ms: number) {
      this.now += ms
    },
  }
  const service = new Service({
    config: resolved.config,
    plan: resolved.plan,
    telemetry,
    now: opts.frozenNow === undefined ? Date.now : () => clock.now,
  })
  const origWrite = process.stdout.write
  // The bootstrap banner goes to stdout; keep test output clean.
  process.stdout.write = (() => true) as never
  let addr
  try {
    addr = await service.start()
  } finally {
    process.stdout.write = origWrite
  }
  const url = `http://127.0.0.1:${addr.port}`
  let closed = false
  const m: Meterd = {
    url,
    service,
    dataDir,
    logs,
    clock,
    async key({ team, account, scopes = ['metering:write', 'analytics:read', 'platform:read', 'platform:write'], tenant, environment } = {}) {
      team ??= account === undefined ? 'team-a' : `${account}-team`
      account ??= 'acct-1'
      const ks = new KeyStore(service.store)
      const { key } = await ks.create({ team, account, scopes, tenant, environment })
      return key
    },
    async close() {
      if (closed) return
      closed = true
      await service.shutdown()
      rmSync(dir, { recursive: true, force: true })
    },
  }
  t.teardown(() => m.close())
  return m
}

export interface Res {
  status: number
  headers: Headers
  body: any
  text: string
}

/** fetch with JSON in and out; never throws on a status. */
export async function call(
  url: string,
  opts: { method?: string; key?: string; body?: unknown; raw?: string | Buffer; headers?: Record<string, string> } = {},
): Promise<Res> {
  const headers: Record<string, string> = { ...(opts.headers ?? {}) }
  if (opts.key) headers['x-api-key'] = opts.key
  let body: string | Buffer | undefined
  if (opts.raw !== undefined) body = opts.raw
  else if (opts.body !== undefined) {
    body = JSON.stringify(opts.body)
    headers['content-type'] ??= 'application/json'
  }
  const res = await fetch(url, { method: opts.method ?? (body !== undefined ? 'POST' : 'GET'), headers, body })
  const text = await res.text()
  let parsed: unknown
  try {
    parsed = text ? JSON.parse(text) : undefined
  } catch {
    parsed = undefined
  }
  return { status: res.status, headers: res.headers, body: parsed, text }
}

/** A child `meterd run` process (compiled output; `npm test` builds first). */
export interface ChildMeterd {
  url: string
  proc: ChildProcess
  stdout: string[]
  stop(signal?: NodeJS.Signals): Promise<number | null>
}

/**
 * Tests run one process per daemon unless they ask for workers (env METERD_WORKERS): the
 * embedded default reads the variable, and a test's own config files get this override after them.
 */
function workersOverride(): string {
  const file = join(tmpdir(), `meterd-test-workers-${process.pid}.yaml`)
  if (!existsSync(file)) writeFileSync(file, 'server:\n  workers: ${env:METERD_WORKERS:-1}\n')
  return file
}

export async function spawnMeterd(
  t: Teardown,
  opts: {
    dataDir: string
    configFiles?: string[]
    env?: Record<string, string>
    readyTimeoutMs?: number
    /** A command that execs the daemon's command line given after it (`prlimit --fsize=…`): same pid. */
    prefix?: string[]
  },
): Promise<ChildMeterd> {
  const port = await freePort()
  const files = opts.configFiles?.length ? [...opts.configFiles, workersOverride()] : []
  const argv = [process.execPath, join(PACKAGE_ROOT, 'bin', 'meterd.js'), 'run', ...files.flatMap((f) => ['--config', f])]
  const [command, ...args] = [...(opts.prefix ?? []), ...argv]
  // Bound to this process: tap ends a file past its timeout without its teardowns (orphans.js).
  const proc = spawnBound(command, args, {
    env: {
      METERD_WORKERS: '1',
      ...process.env,
      METERD_ENDPOINT: `127.0.0.1:${port}`,
      METERD_OTLP_GRPC_ENDPOINT: '127.0.0.1:0',
      METERD_OTLP_HTTP_ENDPOINT: '127.0.0.1:0',
      METERD_DATA_DIR: opts.dataDir,
      METERD_BOOTSTRAP_API_KEY: ADMIN_KEY,
      METERD_LOG_LEVEL: 'warn',
      ...(opts.env ?? {}),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const stdout: string[] = []
  proc.stdout!.on('data', (d) => stdout.push(String(d)))
  proc.stderr!.on('data', (d) => stdout.push(String(d)))
  const exited = new Promise<number | null>((resolve) => proc.on('exit', (code, sig) => resolve(code ?? (sig ? -1 : null))))
  const url = `http://127.0.0.1:${port}`
  const child: ChildMeterd = {
    url,
    proc,
    stdout,
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal)
      return exited
    },
  }
  // Before the wait: a daemon that never gets ready is killed too. Registered after it, such a
  // daemon kept the test process alive until tap's timeout for the file (hiding why it failed),
  // and outlived it.
  t.teardown(() => child.stop('SIGKILL'))
  // Only a guard against a hang: a daemon of one process took 10 to 25 s to get ready on a
  // machine loaded 6 times over (2 s of CPU), one of two workers up to 40 s; no bound is promised.
  const until = Date.now() + (opts.readyTimeoutMs ?? 60_000)
  for (;;) {
    if (proc.exitCode !== null) throw new Error('meterd exited early:\n' + stdout.join(''))
    try {
      const r = await fetch(url + '/readyz')
      if (r.status === 200) break
    } catch {}
    if (Date.now() > until) throw new Error('meterd did not become ready:\n' + stdout.join(''))
    await new Promise((r) => setTimeout(r, 50))
  }
  return child
}

/** Every stored completion of `key`'s team (the admin key's by default), read through the API: transactionId → ids. */
export async function storedCompletions(url: string, key = ADMIN_KEY): Promise<Map<string, string[]>> {
  const out = new Map<string, string[]>()
  for (let page = 0; ; page++) {
    const res = await call(`${url}/profitstream/v2/api/sources/metrics/ai/completions?size=1000&page=${page}`, { key })
    const list = res.body._embedded.aICompletionMetricResourceList as { id: string; transactionId: string }[]
    for (const r of list) out.set(r.transactionId, [...(out.get(r.transactionId) ?? []), r.id])
    if (page + 1 >= res.body.page.totalPages) break
  }
  return out
}

/**
 * How the acknowledged records (transactionId → the id of their 201) stand among the stored ones
 * (storedCompletions): `missing` not stored, `wrongId` stored more than once or under another id.
 */
export function compareStored(stored: Map<string, string[]>, acked: Map<string, string>): { missing: number; wrongId: number } {
  let missing = 0
  let wrongId = 0
  for (const [tx, id] of acked) {
    const ids = stored.get(tx)
    if (!ids) missing++
    else if (ids.length !== 1 || ids[0] !== id) wrongId++
  }
  return { missing, wrongId }
}

/** The pids of a clustered daemon's worker processes (the children of its supervisor). */
export function workerPids(d: ChildMeterd): number[] {
  try {
    return execFileSync('pgrep', ['-P', String(d.proc.pid)], { encoding: 'utf8' }).split('\n').filter(Boolean).map(Number)
  } catch {
    return []
  }
}

/** Whether a process of this pid exists. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** Sends `sig` to `pid`, if it is still there. */
export function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig)
  } catch {}
}

/** Removes a directory tree (for tests that manage their own data dirs). */
export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true })
}

/** Polls `fn` every 25 ms until it returns something other than undefined; throws after `ms`. */
export async function until<T>(what: string, fn: () => Promise<T | undefined>, ms = 15_000): Promise<T> {
  const end = Date.now() + ms
  for (;;) {
    const v = await fn()
    if (v !== undefined) return v
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

/**
 * A proxy on 127.0.0.1 in front of `target` that forwards every request (so the target acts on
 * it) but answers `delayMs` late: a slow link whose answers a client may give up on. `onForward`
 * sees each request's URL as it is forwarded.
 */
export async function slowProxy(t: Teardown, target: string, onForward: (url: string) => void = () => undefined, delayMs = 400): Promise<string> {
  const { createServer, request } = await import('node:http')
  const proxy = createServer((req, res) => {
    const out = request(new URL(req.url!, target), { method: req.method, headers: req.headers }, (r) => {
      onForward(req.url ?? '')
      setTimeout(() => {
        res.writeHead(r.statusCode!, r.headers)
        r.pipe(res)
      }, delayMs)
    })
    req.pipe(out)
  })
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', () => r()))
  t.teardown(() => new Promise<void>((r) => (proxy.closeAllConnections(), proxy.close(() => r()))))
  return `http://127.0.0.1:${(proxy.address() as import('node:net').AddressInfo).port}`
}
