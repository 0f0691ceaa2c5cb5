/**
 * Webhook delivery benchmark (issue 5): the real delivery engine (LMDB queue → per-endpoint
 * concurrency → signed attempt over undici keep-alive → outcome recorded in LMDB), running in
 * a meterd Service from dist/, delivering to a bare node:http receiver in its own child process.
 *
 * Figures, each against a baseline measured in the same run:
 *   signed deliveries/s vs unsigned deliveries/s (target ≥ 0.9)
 *   deliveries/s vs the bare undici request rate to the same receiver, same concurrency (reported)
 * Run: `npm run bench -- webhook` (BENCH_EVENTS=n changes the events per measured run).
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { Agent, request } from 'undici'
import { stringify } from 'yaml'
import { writeFileSync } from 'node:fs'
import { PACKAGE_ROOT, fmt, header, line, median, ratioLine, spawnScript, stealMeter } from './lib.js'

const dist = (p) => join(PACKAGE_ROOT, 'dist', 'src', p)
const { Service } = await import(dist('host/service.js'))
const { resolveConfig } = await import(dist('host/resolve.js'))
const { factoryMap } = await import(dist('host/graph.js'))
const { FACTORIES } = await import(dist('components.js'))
const { DEFAULT_CONFIG_PATH } = await import(dist('core/config/load.js'))
const { createTelemetry } = await import(dist('core/telemetry.js'))

const EVENTS = Math.max(100, Number(process.env.BENCH_EVENTS) || 4000)
const CONCURRENCY = 16
const ROUNDS = 5

const receiver = await spawnScript(`
  import { createServer } from 'node:http'
  const server = createServer((req, res) => { req.resume(); req.on('end', () => { res.writeHead(200, { 'content-length': '0' }); res.end() }) })
  server.keepAliveTimeout = 60_000
  server.listen(Number(process.env.PORT), '127.0.0.1')
`)
const url = `${receiver.url}/hook`

const dir = mkdtempSync(join(tmpdir(), 'meterd-bench-wh-'))
const cfgFile = join(dir, 'bench.yaml')
writeFileSync(cfgFile, stringify({
  server: { endpoint: '127.0.0.1:0' },
  storage: { path: join(dir, 'data') },
  extensions: { exportconfigs: { allow_private_destinations: ['127.0.0.1'], max_concurrency_per_endpoint: CONCURRENCY, poll_interval_ms: 100 } },
  service: { extensions: ['apikeys', 'exportconfigs'], telemetry: { logs: { level: 'warn' } } },
}))
const resolved = resolveConfig([DEFAULT_CONFIG_PATH, cfgFile], factoryMap(FACTORIES), { METERD_BOOTSTRAP_API_KEY: 'hak_bench_adminadminadminadminadminad01' })
if (resolved.issues.length) throw new Error(JSON.stringify(resolved.issues))
const telemetry = createTelemetry({ level: 'warn', destination: new Writable({ write: (_c, _e, cb) => cb() }) })
const service = new Service({ config: resolved.config, plan: resolved.plan, telemetry })
const origWrite = process.stdout.write
process.stdout.write = () => true // the first-key banner
try {
  await service.start()
} finally {
  process.stdout.write = origWrite
}
const ext = service.getExtension('exportconfigs')
const { engine, store } = ext

async function makeConfig(team, signed) {
  const now = new Date().toISOString()
  const c = { id: `exp_bench_${team}`, team, name: team, url, enabled: true, eventTypes: ['usage.completion'], filters: {}, batching: null, timeoutMs: null, createdAt: now, updatedAt: now }
  await store.create(c, false, Date.now())
  if (signed) await store.rotate(c.id, false, Date.now()) // a 24 h overlap: two signatures per delivery, the worst case
  return c
}
const unsignedCfg = await makeConfig('bench-unsigned', false)
const signedCfg = await makeConfig('bench-signed', true)

// A realistic usage.completion body (~1 KB).
const data = { model: 'gpt-4o-mini', provider: 'OpenAI', inputTokenCount: 12, outputTokenCount: 5, totalTokenCount: 17, stopReason: 'END', organizationName: 'AcmeOrg', productName: 'Gold', agent: 'agent-a', traceId: 'trace-1', requestTime: '2026-11-21T23:55:47.661Z', responseTime: '2026-11-21T23:55:47.678Z', cost: { currency: 'USD', total: '0.0000048', parts: { input: '0.0000018', output: '0.000003' }, source: 'pricebook' }, subscriber: { id: 'u-1', email: 'u1@example.com' }, usageMetadata: { note: 'x'.repeat(400) } }
let seq = 0

/** Queues EVENTS events for a configuration and waits until the engine has delivered all of them. */
async function deliveries(config) {
  const items = []
  for (let i = 0; i < EVENTS; i++) items.push({ config, event: { id: `evt_bench_${seq++}`, type: 'usage.completion', created: new Date().toISOString(), teamId: config.team, data } })
  const t0 = performance.now()
  for (let i = 0; i < items.length; i += 1000) await engine.enqueue(items.slice(i, i + 1000))
  while (engine.queue.depth > 0) await new Promise((r) => setTimeout(r, 2))
  return EVENTS / ((performance.now() - t0) / 1000)
}

/** The same number of bare undici POSTs of the same body, CONCURRENCY at a time, over a keep-alive pool. */
async function bareUndici() {
  const agent = new Agent({ connections: CONCURRENCY, keepAliveTimeout: 30_000 })
  const body = JSON.stringify({ id: 'evt_bare', type: 'usage.completion', created: new Date().toISOString(), teamId: 't', data })
  let left = EVENTS
  const t0 = performance.now()
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (left-- > 0) {
      const res = await request(url, { method: 'POST', body, headers: { 'content-type': 'application/json' }, dispatcher: agent })
      await res.body.dump()
    }
  }))
  const rate = EVENTS / ((performance.now() - t0) / 1000)
  await agent.close()
  return rate
}

header(`webhook delivery (${EVENTS} events per run, ${CONCURRENCY} per endpoint, medians of ${ROUNDS} alternating rounds)`)
await deliveries(unsignedCfg) // warm-up: JIT, connections, LMDB pages
await bareUndici()
// Runs of about a second each: a burst of other load on a shared VM moves one of them a lot,
// so the sides alternate and medians are compared.
const rounds = { unsigned: [], signed: [], bare: [] }
const steal = stealMeter()
for (let r = 0; r < ROUNDS; r++) {
  rounds.unsigned.push(await deliveries(unsignedCfg))
  rounds.signed.push(await deliveries(signedCfg))
  rounds.bare.push(await bareUndici())
}
const stealPct = steal()
const unsigned = median(rounds.unsigned)
const signed = median(rounds.signed)
const bare = median(rounds.bare)
line('unsigned deliveries/s', `${fmt(unsigned)} (rounds ${rounds.unsigned.map((x) => fmt(x)).join('/')})`)
line('signed deliveries/s (2 signatures)', `${fmt(signed)} vs ${fmt(unsigned)} unsigned (rounds ${rounds.signed.map((x) => fmt(x)).join('/')})`)
line('bare undici requests/s', fmt(bare))
process.stdout.write(ratioLine('signed / unsigned', signed, unsigned, 0.9) + '\n')
line('deliveries / bare undici', `${fmt(unsigned / bare, 2)} (${fmt(unsigned)} deliveries/s vs ${fmt(bare)} requests/s; reported, no target)`)
line('CPU steal during the rounds', `${fmt(stealPct, 1)}%`)
const metrics = await service.registry.getSingleMetricAsString('meterd_webhook_deliveries_failed_total')
line('failed attempts during the bench', /total (\d+)/.exec(metrics)?.[1] ?? '?')
await service.shutdown()
await receiver.stop()
rmSync(dir, { recursive: true, force: true })
