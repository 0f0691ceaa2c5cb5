import { execFile } from 'node:child_process'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { ADMIN_KEY, call, removeDir, spawnMeterd, tempDir } from '../helpers/meterd.js'
import { completion } from '../fixtures/wire-examples.js'

const run = promisify(execFile)
const C = '/meter/v2/ai/completions'
const LIST = '/profitstream/v2/api/sources/metrics/ai/completions'

t.test('keys create/list/revoke against the data directory of a running daemon', async (t) => {
  const dataDir = tempDir('meterd-keys-')
  t.teardown(() => removeDir(dataDir))
  const d = await spawnMeterd(t, { dataDir })
  t.notMatch(d.stdout.join(''), ADMIN_KEY, 'the first admin key, supplied by METERD_BOOTSTRAP_API_KEY, is never echoed')
  const cli = async (...args: string[]) =>
    run(process.execPath, [join(PACKAGE_ROOT, 'bin', 'meterd.js'), 'keys', ...args], { env: { ...process.env, METERD_DATA_DIR: dataDir } })

  const created = JSON.parse((await cli('create', '--team', 'team-x', '--account', 'acct-x', '--scopes', 'metering:write', '--json')).stdout)
  t.match(created, { key: /^hak_default_[A-Za-z0-9]{32}$/, team: 'team-x', account: 'acct-x', scopes: ['metering:write'] })
  const reader = JSON.parse((await cli('create', '--team', 'team-x', '--scopes', 'analytics:read', '--json')).stdout)

  const post = await call(d.url + C, { key: created.key, body: completion() })
  t.equal(post.status, 201, 'a key created by the CLI works at once in the running daemon')
  const viaBearer = await call(d.url + C, { headers: { authorization: `Bearer ${created.key}` }, body: completion() })
  t.equal(viaBearer.status, 201, 'Authorization: Bearer works too')
  const forbidden = await call(d.url + LIST, { key: created.key })
  t.equal(forbidden.status, 403, 'a metering-only key cannot read')
  t.equal(forbidden.body.error.type, 'permission_error')
  const read = await call(d.url + LIST, { key: reader.key })
  t.equal(read.body.page.totalElements, 2, 'the reader sees its team’s records')

  const listed = (await cli('list', '--json')).stdout
  t.notMatch(listed, created.key, 'keys list never shows a key')
  t.match(JSON.parse(listed), [{ team: 'default', scopes: ['admin'] }, { id: created.id }, { id: reader.id }])

  await cli('revoke', created.id)
  const revoked = await call(d.url + C, { key: created.key, body: completion() })
  t.equal(revoked.status, 401, 'a revoked key is refused at once')
  t.equal(revoked.body.error.code, 'invalid_api_key')

  await t.rejects(cli('create', '--team', 't', '--scopes', 'everything'), { code: 64 }, 'unknown scope is a usage error')
  await t.rejects(cli('revoke', 'key_nope'), { code: 1 })
  await d.stop()

  // The banner is printed only on a fresh store.
  const again = await spawnMeterd(t, { dataDir })
  t.notMatch(again.stdout.join(''), 'created the first admin key')
  await again.stop()
})
