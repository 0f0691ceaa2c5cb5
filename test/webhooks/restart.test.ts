import { writeFileSync, mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { spawnSync } from 'node:child_process'
import t from 'tap'
import { ADMIN_KEY, call, removeDir, spawnMeterd, tempDir, writeConfig } from '../helpers/meterd.js'
import { DEFAULT_CONFIG_PATH } from '../../src/core/config/load.js'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { completion } from '../fixtures/wire-examples.js'
import { signatureHeader } from '../../src/domain/webhooks/signature.js'
import { api, startReceiver } from '../helpers/webhook-receiver.js'

t.test('SIGKILL with deliveries pending (one in flight, the rest queued) → all delivered after restart', async (t) => {
  const dir = tempDir()
  t.teardown(() => removeDir(dir))
  const dataDir = join(dir, 'data')
  const config = writeConfig(dir, {
    extensions: { exportconfigs: { allow_private_destinations: ['127.0.0.1'], max_concurrency_per_endpoint: 1, poll_interval_ms: 50 } },
  })
  const files = [DEFAULT_CONFIG_PATH, config]
  // First life: the receiver holds every request open, so nothing completes.
  let answering = false
  const rx = await startReceiver(t, () => (answering ? { status: 200 } : 'hang'))
  const first = await spawnMeterd(t, { dataDir, configFiles: files })
  const key = ADMIN_KEY
  const cfg = await call(`${api(first)}?teamId=default`, { key, body: { name: 'k', url: rx.url } })
  t.equal(cfg.status, 201)
  const secret = cfg.body.signingSecret // signed by default: the create answer shows the secret once
  const N = 20
  const ids: string[] = []
  for (let i = 0; i < N; i++) {
    const r = await call(`${first.url}/meter/v2/ai/completions`, { key, body: completion() })
    t.equal(r.status, 201)
    ids.push(r.body.id)
  }
  const pending = await call(`${api(first)}/${cfg.body.id}/deliveries?status=pending&size=100`, { key })
  t.equal(pending.body.page.totalElements, N, 'all queued, none delivered')
  t.equal(await first.stop('SIGKILL'), -1, 'killed')

  // Second life: the receiver answers; everything queued before the kill goes out.
  answering = true
  const second = await spawnMeterd(t, { dataDir, configFiles: files })
  await rx.waitFor(N, 15_000)
  const until = Date.now() + 10_000
  let delivered
  for (;;) {
    delivered = await call(`${api(second)}/${cfg.body.id}/deliveries?status=succeeded&size=100`, { key })
    if (delivered.body.page.totalElements === N || Date.now() > until) break
    await new Promise((r) => setTimeout(r, 50))
  }
  t.equal(delivered.body.page.totalElements, N, 'every delivery succeeded')
  const recordIds = new Set(rx.received.map((r) => r.json.data.id))
  t.same([...recordIds].sort(), [...ids].sort(), 'every acknowledged record was delivered')
  for (const r of rx.received) {
    const ts = r.headers['x-service-webhook-timestamp'] as string
    t.equal(r.headers['x-service-signature-256'], signatureHeader([secret], ts, r.body), 'signed after restart with the stored secret')
  }
  await second.stop('SIGTERM')
})

t.test('meterd webhook verify and listen', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'meterd-wh-cli-'))
  t.teardown(() => removeDir(dir))
  const bin = join(PACKAGE_ROOT, 'bin', 'meterd.js')
  const secret = 'whsec_cli_secret'
  const body = '{"id":"evt_cli","type":"test","created":"2025-06-01T00:00:00.000Z","teamId":"t","data":{}}'
  const ts = String(Math.floor(Date.now() / 1000))
  writeFileSync(join(dir, 'b.bin'), body)
  writeFileSync(join(dir, 'h.txt'), `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Service-Webhook-Timestamp: ${ts}\r\nX-Service-Signature-256: ${signatureHeader([secret], ts, body)}\r\nX-Service-Webhook-Id: evt_cli\r\n`)
  const run = (...args: string[]) => spawnSync(process.execPath, [bin, 'webhook', ...args], { encoding: 'utf8', timeout: 20_000 })
  const ok = run('verify', '--secret', secret, '--headers', join(dir, 'h.txt'), '--body', join(dir, 'b.bin'))
  t.equal(ok.status, 0, ok.stderr)
  t.match(ok.stdout, /valid: signature matches.*event evt_cli/)
  const wrong = run('verify', '--secret', 'whsec_other', '--headers', join(dir, 'h.txt'), '--body', join(dir, 'b.bin'))
  t.equal(wrong.status, 1)
  t.match(wrong.stdout, /INVALID: signature_mismatch/)
  writeFileSync(join(dir, 'b2.bin'), body.replace('evt_cli', 'evt_clj'))
  t.equal(run('verify', '--secret', secret, '--headers', join(dir, 'h.txt'), '--body', join(dir, 'b2.bin')).status, 1, 'a changed body fails')
  const old = run('verify', '--secret', secret, '--headers', join(dir, 'h.txt'), '--body', join(dir, 'b.bin'), '--now', String(Number(ts) + 301))
  t.match(old.stdout, /timestamp_too_old/)
  t.equal(run('verify', '--headers', 'x').status, 64, 'usage error without --secret')

  // listen: a real child receiver; verified, duplicate and rejected deliveries.
  const { spawn } = await import('node:child_process')
  const { freePort } = await import('../helpers/meterd.js')
  const port = await freePort()
  const proc = spawn(process.execPath, [bin, 'webhook', 'listen', '--port', String(port), '--secret', secret], { stdio: ['ignore', 'pipe', 'pipe'] })
  t.teardown(() => proc.kill('SIGKILL'))
  let out = ''
  proc.stdout.on('data', (d) => (out += d))
  const until = Date.now() + 10_000
  while (!out.includes('listening on') && Date.now() < until) await new Promise((r) => setTimeout(r, 20))
  const headers = Object.fromEntries(
    readFileSync(join(dir, 'h.txt'), 'utf8').split('\r\n').slice(1).filter(Boolean).map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1).trim()]),
  )
  const post = (b: string) => fetch(`http://127.0.0.1:${port}/hook`, { method: 'POST', headers, body: b })
  t.equal((await post(body)).status, 200)
  t.equal((await post(body)).status, 200, 'a duplicate is acknowledged')
  t.equal((await post(body + ' ')).status, 401, 'a tampered body is refused')
  const lines = out.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l))
  t.same(lines.map((l) => l.verdict), ['verified', 'duplicate', 'rejected'])
  t.equal(lines[0].eventId, 'evt_cli')
})
