/**
 * `meterd backup` beside a running daemon: the copy is a data directory of its own, taken from one
 * read snapshot while completions keep arriving, and a daemon started on it has every record
 * acknowledged before the backup began, the source's keys, and its webhook signing secrets.
 * (Refusals and a store without master.key: backup-refusals.test.ts.)
 */
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { verifyWebhook } from '../../src/domain/webhooks/verify.js'
import { meterd, meterdOn } from '../helpers/cli.js'
import { ADMIN_KEY, call, compareStored, removeDir, spawnMeterd, storedCompletions, tempDir } from '../helpers/meterd.js'
import { startReceiver } from '../helpers/webhook-receiver.js'
import { completion } from '../fixtures/wire-examples.js'

const C = '/meter/v2/ai/completions'
const EXPORTS = '/profitstream/v2/api/export-configurations'

t.test('a backup taken under load restores every acknowledged record, the keys and the signing secrets', async (t) => {
  const base = tempDir('meterd-backup-')
  t.teardown(() => removeDir(base))
  const source = join(base, 'source')
  const target = join(base, 'backups', 'first')
  const conf = join(base, 'webhooks.yaml')
  writeFileSync(conf, 'extensions:\n  exportconfigs:\n    allow_private_destinations: [127.0.0.1]\n')
  const configFiles = [join(PACKAGE_ROOT, 'config', 'meterd.yaml'), conf]
  const d = await spawnMeterd(t, { dataDir: source, configFiles })

  const rx = await startReceiver(t)
  const created = await call(d.url + EXPORTS, { key: ADMIN_KEY, body: { name: 'before the backup', url: rx.url } })
  t.equal(created.status, 201, 'an export configuration with a signing secret')
  const secret: string = created.body.signingSecret

  // A client posting completions for the whole test: transactionId → the id of its 201.
  const acked = new Map<string, string>()
  let posting = true
  const client = (async () => {
    while (posting) {
      const body = Array.from({ length: 10 }, () => completion())
      const res = await call(d.url + C, { key: ADMIN_KEY, body })
      if (res.status !== 201) throw new Error(`the source answered ${res.status}: ${res.text}`)
      body.forEach((b, i) => acked.set(b.transactionId as string, res.body[i].id))
    }
  })()
  t.teardown(() => void (posting = false))
  while (acked.size < 300) await new Promise((r) => setTimeout(r, 10))

  const filesBefore = readdirSync(source).sort()
  const before = new Map(acked)
  const backup = await meterd(['backup', '--data-dir', source, '--to', target])
  const after = acked.size
  t.same(readdirSync(source).sort(), filesBefore, 'nothing was added to the data directory')
  // Writes go on after the backup, and the backup must not have held them up.
  while (acked.size < after + 100) await new Promise((r) => setTimeout(r, 10))
  posting = false
  await client
  await d.stop()

  t.equal(backup.code, 0, `backup exits 0 (${backup.stderr})`)
  t.match(backup.stdout, `backup of ${source} written to ${target}`, 'it says what it wrote')
  const records = Number(/data\.mdb +\d+ bytes, (\d+) usage records/.exec(backup.stdout)?.[1])
  // At most one batch (10) more than acknowledged: a commit is seen before its 201 is sent.
  t.ok(records >= before.size && records <= after + 10, `it counts the records of its snapshot (${before.size} ≤ ${records} ≤ ${after} + 10)`)
  t.match(backup.stdout, /master\.key +copied/, 'and that master.key went with it')
  t.match(backup.stdout, `meterd doctor --data-dir ${target}`, 'it says how to check the backup')
  t.same(readdirSync(join(base, 'backups')), ['first'], 'no partial copy is left beside it')
  t.same(readdirSync(target).sort(), ['data.mdb', 'master.key'], 'the backup holds the store and the master key, nothing else')
  t.equal(statSync(target).mode & 0o777, 0o700, 'the directory is owner-only')
  t.equal(statSync(join(target, 'data.mdb')).mode & 0o777, 0o600, 'data.mdb is owner-only')
  t.equal(statSync(join(target, 'master.key')).mode & 0o777, 0o600, 'master.key is owner-only')
  t.ok(readFileSync(join(target, 'master.key')).equals(readFileSync(join(source, 'master.key'))), 'master.key is the source key')

  const doctor = await meterdOn(target, 'doctor', '--data-dir', target)
  t.equal(doctor.code, 0, 'doctor finds the backup sound')
  t.match(doctor.out, `ok: database usage-records: ${records + 1} entries`, 'the records the backup counted (and lmdb-js\'s shared structures)')

  // A daemon on the backup, whose own first admin key would be another: the source's key works.
  const restored = await spawnMeterd(t, { dataDir: target, configFiles, env: { METERD_BOOTSTRAP_API_KEY: 'hak_default_otherotherotherotherother01' } })
  t.equal((await call(`${restored.url}/profitstream/v2/api/sources/metrics/ai/completions?size=1`, { key: ADMIN_KEY })).status, 200, "the source's admin key works on it")
  const stored = await storedCompletions(restored.url)
  const { missing, wrongId } = compareStored(stored, before)
  t.equal(missing, 0, `every record acknowledged before the backup began is there (${before.size})`)
  t.equal(wrongId, 0, 'once, under the id it was acknowledged with')
  t.equal(stored.size, records, 'and as many records as the backup said')

  // The signing secret sealed with the source's master.key opens on the restored daemon.
  const test = await call(`${restored.url}${EXPORTS}/${created.body.id}/send-test-event`, { key: ADMIN_KEY, body: {} })
  t.equal(test.status, 202, 'a test event of the export configuration made before the backup')
  const [got] = await rx.waitFor(1, 30_000)
  t.ok(verifyWebhook(got.body, got.headers, { secrets: secret }).ok, 'the test event is signed with the secret shown at creation')
  await restored.stop()
})
