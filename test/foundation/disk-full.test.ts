/**
 * A full disk (issue 15 item 2). The daemon runs under a file-size limit (`prlimit --fsize`, no
 * root needed): past it, the kernel refuses LMDB's writes (EFBIG) as a full file system refuses
 * them (ENOSPC), and LMDB's commit fails the same way. Raising the limit of the running process
 * (`prlimit --pid`) is space coming back.
 */
import { execFileSync, spawnSync } from 'node:child_process'
import t from 'tap'
import { statSync } from 'node:fs'
import { join } from 'node:path'
import { ADMIN_KEY, call, removeDir, spawnMeterd, tempDir, writeConfig, type ChildMeterd } from '../helpers/meterd.js'
import { completion } from '../fixtures/wire-examples.js'
import { API, toolBody } from '../helpers/pricing.js'
import { DEFAULT_CONFIG_PATH } from '../../src/core/config/load.js'

const C = '/meter/v2/ai/completions'
const LIST = '/profitstream/v2/api/sources/metrics/ai/completions'
const LIMIT = `--fsize=${12 * 1024 * 1024}:unlimited`
const hasPrlimit = spawnSync('prlimit', ['--version']).status === 0

/** A batch of 500 completions with long transactionIds (about 0.5 MiB in the store). */
function batch(tag: string): Record<string, unknown>[] {
  return Array.from({ length: 500 }, (_, i) => completion({ transactionId: `${tag}-${i}-${'x'.repeat(200)}` }))
}

/** Posts batches until one is refused; the transactionIds acknowledged and the refusal. */
async function fill(d: ChildMeterd, acked: Set<string>, tag: string) {
  for (let n = 0; n < 200; n++) {
    const body = batch(`${tag}${n}`)
    const res = await call(d.url + C, { key: ADMIN_KEY, body }).catch((err) => {
      throw new Error(`${(err as Error).message} (exit ${d.proc.exitCode} ${d.proc.signalCode}); the daemon said:\n${d.stdout.join('').slice(-3000)}`)
    })
    if (res.status !== 201) return { res, body }
    for (const r of body) acked.add(r.transactionId as string)
  }
  throw new Error('the limit was never reached')
}

async function storedTransactions(url: string): Promise<Map<string, number>> {
  const out = new Map<string, number>()
  for (let page = 0; ; page++) {
    const res = await call(`${url}${LIST}?size=1000&page=${page}`, { key: ADMIN_KEY })
    for (const r of res.body._embedded.aICompletionMetricResourceList as { transactionId: string }[]) out.set(r.transactionId, (out.get(r.transactionId) ?? 0) + 1)
    if (page + 1 >= res.body.page.totalPages) break
  }
  return out
}

async function metric(url: string, name: string): Promise<number> {
  const text = (await call(url + '/metrics')).text
  const line = text.split('\n').find((l) => l.startsWith(name + ' '))
  return Number(line?.split(' ')[1])
}

async function until(what: string, check: () => Promise<boolean>, ms = 20_000): Promise<void> {
  const end = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 200))
  }
}

const alive = (d: ChildMeterd) => d.proc.exitCode === null && d.proc.signalCode === null

t.test('a full disk: 503 with Retry-After, not ready, counted, logged; the daemon stays up and writes again by itself', { skip: !hasPrlimit && 'prlimit (util-linux) is not installed' }, async (t) => {
  const dataDir = tempDir('meterd-full-')
  t.teardown(() => removeDir(dataDir))
  const d = await spawnMeterd(t, { dataDir, prefix: ['prlimit', LIMIT] })
  const acked = new Set<string>()
  const refused: string[] = []

  const { res, body } = await fill(d, acked, 'a')
  t.ok(acked.size > 0, `${acked.size} records acknowledged before the disk filled`)
  t.equal(res.status, 503, 'the write that does not fit is answered 503')
  t.ok(Number(res.headers.get('retry-after')) >= 1, 'with Retry-After')
  t.match(res.body, { error: { type: 'api_error', code: 'store_unwritable', message: /cannot be written/, doc_url: /\/docs\/errors#store_unwritable$/ } }, 'in the error shape, saying why')
  refused.push(...body.map((r) => r.transactionId as string))

  // More writes while full: each refused the same way, none ends the process.
  for (let i = 0; i < 3; i++) {
    const more = batch(`full${i}`)
    const r = await call(d.url + C, { key: ADMIN_KEY, body: more })
    t.equal(r.status, 503, `write ${i + 1} while full: 503`)
    refused.push(...more.map((x) => x.transactionId as string))
  }
  await new Promise((r) => setTimeout(r, 500)) // lmdb-js's leftover rejections are settled by now
  t.ok(alive(d), 'the daemon is still running')

  const ready = await call(d.url + '/readyz')
  t.equal(ready.status, 503, '/readyz is not ready')
  t.match(ready.body, { status: 'store_unwritable', reason: /data\.mdb/ }, '/readyz says why')
  t.equal(await metric(d.url, 'meterd_store_writable'), 0, 'meterd_store_writable is 0')
  t.ok((await metric(d.url, 'meterd_store_write_failures_total')) >= 4, 'every failed write is counted')
  t.ok(
    d.stdout.join('').split('\n').some((l) => l.includes('"level":50') && l.includes('the store cannot write') && l.includes('data.mdb')),
    'an error is logged, naming the data file',
  )
  t.equal((await call(d.url + '/healthz')).status, 200, 'alive (/healthz) while not ready')

  // Space comes back: with no request at all, the store notices and turns ready.
  execFileSync('prlimit', ['--pid', String(d.proc.pid), '--fsize=unlimited:unlimited'])
  await until('/readyz to turn ready', async () => (await call(d.url + '/readyz')).status === 200)
  t.equal(await metric(d.url, 'meterd_store_writable'), 1, 'meterd_store_writable is 1 again')
  const after = batch('after')
  t.equal((await call(d.url + C, { key: ADMIN_KEY, body: after })).status, 201, 'writes are accepted again')
  for (const r of after) acked.add(r.transactionId as string)
  t.equal(await d.stop('SIGTERM'), 0, 'a clean shutdown')

  const again = await spawnMeterd(t, { dataDir })
  const stored = await storedTransactions(again.url)
  t.equal([...acked].filter((tx) => stored.get(tx) !== 1).length, 0, `all ${acked.size} acknowledged records are stored, once each, after a restart`)
  t.equal(refused.filter((tx) => stored.has(tx)).length, 0, 'nothing of a refused write was stored')
  await again.stop()
})

t.test('a daemon stops cleanly on a full disk and starts again on it without crashing', { skip: !hasPrlimit && 'prlimit (util-linux) is not installed' }, async (t) => {
  const dataDir = tempDir('meterd-full-restart-')
  t.teardown(() => removeDir(dataDir))
  const d = await spawnMeterd(t, { dataDir, prefix: ['prlimit', LIMIT] })
  const acked = new Set<string>()
  t.equal((await fill(d, acked, 'a')).res.status, 503, 'the disk is full')
  t.equal(await d.stop('SIGTERM'), 0, 'SIGTERM on a full disk: a clean exit, no hang')

  // Started again on the still-full disk: it starts, and the next large write is refused, not fatal.
  const second = await spawnMeterd(t, { dataDir, prefix: ['prlimit', LIMIT] })
  const { res } = await fill(second, acked, 'b')
  t.equal(res.status, 503, 'the large write is answered 503')
  await new Promise((r) => setTimeout(r, 500))
  t.ok(alive(second), 'the daemon is still running')
  t.equal((await call(second.url + '/readyz')).status, 503, 'and says it is not ready')
  t.equal(await second.stop('SIGTERM'), 0, 'a clean exit')

  const third = await spawnMeterd(t, { dataDir })
  const stored = await storedTransactions(third.url)
  t.equal([...acked].filter((tx) => stored.get(tx) !== 1).length, 0, `all ${acked.size} acknowledged records are stored`)
  await third.stop()
})

t.test('an admin write on a full disk (a new tool): 503 in the error shape, the daemon stays up, and the same write succeeds once there is space', { skip: !hasPrlimit && 'prlimit (util-linux) is not installed' }, async (t) => {
  const dir = tempDir('meterd-full-admin-')
  t.teardown(() => removeDir(dir))
  // No space written ahead of the data: the file ends where the data ends, and the limit is set there.
  const cfg = writeConfig(dir, { storage: { preallocate_mb: 0 } })
  const d = await spawnMeterd(t, { dataDir: join(dir, 'data'), configFiles: [DEFAULT_CONFIG_PATH, cfg] })
  execFileSync('prlimit', ['--pid', String(d.proc.pid), `--fsize=${statSync(join(dir, 'data', 'data.mdb')).size}:unlimited`])
  // A tool larger than the whole data file (10,000 price tiers): the commit must grow the file, whatever pages are free.
  const tiers = Array.from({ length: 10_000 }, (_, i) => ({ upTo: i + 1, unitPrice: '0.001' }))
  const body = toolBody('full-disk-tool', { name: 'calls', aggregationType: 'COUNT', tiersMode: 'volume', tiers: [...tiers, { upTo: null, unitPrice: '0.0001' }] })
  const res = await call(`${d.url}${API}/tools`, { key: ADMIN_KEY, body })
  t.equal(res.status, 503, res.text.slice(0, 300))
  t.match(res.body, { error: { type: 'api_error', code: 'store_unwritable', message: /cannot be written/, doc_url: /\/docs\/errors#store_unwritable$/ } }, 'in the error shape')
  t.equal((await call(`${d.url}${API}/tools/by-tool-id/full-disk-tool`, { key: ADMIN_KEY })).status, 404, 'no tool was stored')
  t.ok(alive(d), 'the daemon is still running')

  execFileSync('prlimit', ['--pid', String(d.proc.pid), '--fsize=unlimited:unlimited'])
  const again = await call(`${d.url}${API}/tools`, { key: ADMIN_KEY, body })
  t.equal(again.status, 201, 'the same write succeeds once there is space')
  t.equal((await call(`${d.url}${API}/tools/by-tool-id/full-disk-tool`, { key: ADMIN_KEY })).status, 200, 'and is stored')
  t.equal(await d.stop('SIGTERM'), 0, 'a clean shutdown')
})
