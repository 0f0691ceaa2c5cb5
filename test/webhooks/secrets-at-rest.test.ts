/**
 * Webhook signing secrets are never stored in clear (issue 15 item 9): without a configured
 * master key meterd generates one in <data dir>/master.key (0600) on first start; secrets
 * stored in clear by older versions are still used and are re-encrypted.
 */
import { existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { call, tempDir, removeDir } from '../helpers/meterd.js'
import { meterd } from '../helpers/cli.js'
import { Store } from '../../src/store/store.js'
import { verifyWebhook } from '../../src/domain/webhooks/verify.js'
import { api, startReceiver, startWebhookMeterd, T0, type Receiver } from '../helpers/webhook-receiver.js'
import type { Meterd } from '../helpers/meterd.js'
import type { DeliveryEngine } from '../../src/domain/webhooks/engine.js'

const inClear = (dataDir: string, secret: string) =>
  readdirSync(dataDir).filter((f) => readFileSync(join(dataDir, f)).includes(Buffer.from(secret.slice('whsec_'.length))))

/** Sends a test event to configuration `id` and returns the delivery as received. */
async function testDelivery(t: Tap.Test, m: Meterd, engine: DeliveryEngine, rx: Receiver, id: string, key: string) {
  const before = rx.received.length
  const r = await call(`${api(m)}/${id}/send-test-event`, { key, body: {} })
  t.equal(r.status, 202)
  await engine.settle()
  return (await rx.waitFor(before + 1))[before]
}

t.test('without a master key: one is generated in master.key (0600), and the secret is not in clear at rest', async (t) => {
  const dir = tempDir()
  t.teardown(() => removeDir(dir))
  const dataDir = join(dir, 'data')
  const rx = await startReceiver(t)
  const first = await startWebhookMeterd(t, { dataDir })
  const keyPath = join(dataDir, 'master.key')
  t.ok(existsSync(keyPath), 'master.key was made on first start')
  t.equal(statSync(keyPath).mode & 0o777, 0o600, 'owner-only')
  t.match(first.m.logs.join('\n'), /generated a master key.*back this file up with data\.mdb/)
  const key = await first.m.key()
  const created = await call(api(first.m), { key, body: { name: 'at rest', url: rx.url } })
  const secret: string = created.body.signingSecret
  t.match(secret, /^whsec_/)
  await first.m.service.store.root.flushed
  t.same(inClear(dataDir, secret), [], 'no file of the data directory holds the secret in clear')
  await first.m.close()

  // After a restart the secret is read back with the key from the file: deliveries verify.
  const again = await startWebhookMeterd(t, { dataDir })
  t.notMatch(again.m.logs.join('\n'), /generated a master key/, 'the existing key is used')
  const got = await testDelivery(t, again.m, again.engine, rx, created.body.id, key)
  t.ok(verifyWebhook(got.body, got.headers, { secrets: secret, now: again.m.clock.now }).ok, 'signed with the secret shown at creation')
})

t.test('a secret stored in clear by an older version still signs, and is re-encrypted at start', async (t) => {
  const dir = tempDir()
  t.teardown(() => removeDir(dir))
  const dataDir = join(dir, 'data')
  const rx = await startReceiver(t)
  const secret = 'whsec_' + 'L'.repeat(43)
  const id = 'exp_legacy1'
  // The layout older versions wrote without a master key: `{alg: 'none', value}`.
  const old = new Store({ path: dataDir })
  const now = new Date(T0).toISOString()
  await old.db('export_configurations').put(id, {
    id, team: 'team-a', name: 'legacy', url: rx.url, enabled: true, eventTypes: ['usage.completion'], filters: {}, batching: null, timeoutMs: null, createdAt: now, updatedAt: now,
  })
  await old.db('export_configuration_signing').put(id, { enabled: true, current: { alg: 'none', value: secret }, currentCreatedAt: T0 })
  await old.close()

  const { m, engine } = await startWebhookMeterd(t, { dataDir })
  const stored = m.service.store.db('export_configuration_signing').get(id)
  t.equal(stored.current.alg, 'aes-256-gcm', 're-encrypted with the master key at start')
  t.match(m.logs.join('\n'), /"resealed":1/)
  const got = await testDelivery(t, m, engine, rx, id, await m.key())
  t.ok(verifyWebhook(got.body, got.headers, { secrets: secret, now: m.clock.now }).ok, 'the old secret still signs: receivers need no change')
})

t.test('configuring a master key later keeps the secrets the generated key sealed; losing the key says so and rotation recovers', async (t) => {
  const dir = tempDir()
  t.teardown(() => removeDir(dir))
  const dataDir = join(dir, 'data')
  const rx = await startReceiver(t)
  const a = await startWebhookMeterd(t, { dataDir })
  const key = await a.m.key()
  const created = (await call(api(a.m), { key, body: { name: 'k', url: rx.url } })).body
  await a.m.close()

  // The operator now sets a key of their own: the secret is resealed under it at start…
  const operatorKey = { exportconfigs: { master_key: 'operator-master-key-0123456789' } }
  const b = await startWebhookMeterd(t, { dataDir, ...operatorKey })
  t.match(b.m.logs.join('\n'), /"resealed":1/)
  await b.m.close()
  // …so master.key is no longer needed.
  rmSync(join(dataDir, 'master.key'))
  const c = await startWebhookMeterd(t, { dataDir, ...operatorKey })
  let got = await testDelivery(t, c.m, c.engine, rx, created.id, key)
  t.ok(verifyWebhook(got.body, got.headers, { secrets: created.signingSecret, now: c.m.clock.now }).ok, 'signed under the operator key')
  await c.m.close()

  // Started without the key that sealed the secret: an error at start names the configuration,
  // deliveries fail (never unsigned) with a reason, and a rotation recovers.
  const d = await startWebhookMeterd(t, { dataDir })
  t.match(d.m.logs.join('\n'), new RegExp(`no master key opens.*${created.id}|${created.id}.*no master key opens`))
  const before = rx.received.length
  const sent = await call(`${api(d.m)}/${created.id}/send-test-event`, { key, body: {} })
  await d.engine.settle()
  t.equal(rx.received.length, before, 'nothing was sent unsigned')
  const delivery = (await call(`${api(d.m)}/${created.id}/deliveries/${sent.body.deliveryId}`, { key })).body
  t.match(delivery, { status: 'pending', lastError: /master key/ })
  const rotated = (await call(`${api(d.m)}/${created.id}/rotate-signing-secret`, { key, body: {} })).body.signingSecret
  t.match((await call(`${api(d.m)}/${created.id}`, { key })).body.signing, { state: 'single' }, 'an unreadable secret is not kept for an overlap')
  d.m.clock.advance(10_000)
  await d.engine.settle()
  got = (await rx.waitFor(before + 1))[before]
  t.ok(verifyWebhook(got.body, got.headers, { secrets: rotated, now: d.m.clock.now }).ok, 'the retry is signed with the new secret')
})

t.test('a damaged master.key stops the start with a message naming it (never a new key over old secrets)', async (t) => {
  const dir = tempDir()
  t.teardown(() => removeDir(dir))
  const dataDir = join(dir, 'data')
  const first = await startWebhookMeterd(t, { dataDir })
  await first.m.close()
  writeFileSync(join(dataDir, 'master.key'), 'not a key\n')
  await t.rejects(startWebhookMeterd(t, { dataDir }), { message: /master\.key is damaged.*restore it from the backup/ })
  t.equal(readFileSync(join(dataDir, 'master.key'), 'utf8'), 'not a key\n', 'left as it was')
})

t.test('a master.key meterd cannot read (a directory in its place) or a damaged one stops meterd run with one line and exit 78, no stack', async (t) => {
  const dir = tempDir()
  t.teardown(() => removeDir(dir))
  const dataDir = join(dir, 'data')
  const { mkdirSync } = await import('node:fs')
  mkdirSync(join(dataDir, 'master.key'), { recursive: true })
  const env = { METERD_DATA_DIR: dataDir, METERD_BOOTSTRAP_API_KEY: 'k'.repeat(40) }
  const asDir = await meterd(['run'], { env, timeout: 30_000 })
  t.equal(asDir.code, 78, 'exit 78, not 1')
  t.match(asDir.stderr, `meterd: ${join(dataDir, 'master.key')} is a directory, not meterd's master key — put the master.key file of your backup in its place`)
  t.notMatch(asDir.stderr, /\n\s+at |start failed/, 'no stack')
  rmSync(join(dataDir, 'master.key'), { recursive: true })
  writeFileSync(join(dataDir, 'master.key'), 'not a key\n')
  const damaged = await meterd(['run'], { env, timeout: 30_000 })
  t.equal(damaged.code, 78)
  t.match(damaged.stderr, /master\.key is damaged \(not a meterd master key\) — restore it from the backup/)
  t.notMatch(damaged.stderr, /\n\s+at |start failed/, 'no stack')
})
