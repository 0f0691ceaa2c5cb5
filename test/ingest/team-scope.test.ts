/**
 * Issue 15 #1: dedup, Idempotency-Key replay and in-flight are per team; the account stays the
 * rate-limit unit. A team belongs to one account.
 */
import { execFile } from 'node:child_process'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { KeyStore } from '../../src/extensions/apikeys/key-store.js'
import { Store } from '../../src/store/store.js'
import { call, removeDir, startMeterd, tempDir } from '../helpers/meterd.js'
import { completion, toolEvent } from '../fixtures/wire-examples.js'

const run = promisify(execFile)
const C = '/meter/v2/ai/completions'
const T = '/meter/v2/tool/events'
const LIST = '/profitstream/v2/api/sources/metrics/ai/completions'

t.test('two teams of one account: the same Idempotency-Key is each team’s own', async (t) => {
  const m = await startMeterd(t)
  const a = await m.key({ team: 'team-a', account: 'acct-1' })
  const b = await m.key({ team: 'team-b', account: 'acct-1' })
  const headers = { 'idempotency-key': 'shared-uuid-1' }
  const bodyA = completion({ transactionId: undefined })
  const first = await call(m.url + C, { key: a, body: bodyA, headers })
  t.equal(first.status, 201)

  const sameBody = await call(m.url + C, { key: b, body: bodyA, headers })
  t.equal(sameBody.status, 201)
  t.not(sameBody.body.id, first.body.id, "team b is not replayed team a's answer")
  t.notOk(sameBody.headers.has('idempotent-replayed'))
  const otherBody = await call(m.url + C, { key: b, body: { ...bodyA, model: 'gpt-4o' }, headers: { 'idempotency-key': 'shared-uuid-2' } })
  const aUsesIt = await call(m.url + C, { key: a, body: { ...bodyA, model: 'o3' }, headers: { 'idempotency-key': 'shared-uuid-2' } })
  t.equal(otherBody.status, 201)
  t.equal(aUsesIt.status, 201, "a key team b used is no 409 for team a: nothing of b's use shows")

  const replay = await call(m.url + C, { key: b, body: bodyA, headers })
  t.equal(replay.body.id, sameBody.body.id, "team b's retry replays team b's answer")
  t.equal(replay.headers.get('idempotent-replayed'), 'true')
  t.equal((await call(m.url + LIST, { key: a })).body.page.totalElements, 2, 'team a stored its two')
  t.equal((await call(m.url + LIST, { key: b })).body.page.totalElements, 2, 'team b stored its two')
})

t.test('tool events: the same transactionId in two teams of one account is two events', async (t) => {
  const m = await startMeterd(t)
  const a = await m.key({ team: 'team-a', account: 'acct-1' })
  const b = await m.key({ team: 'team-b', account: 'acct-1' })
  const body = toolEvent()
  const ea = await call(m.url + T, { key: a, body })
  const eb = await call(m.url + T, { key: b, body })
  t.not(eb.body.id, ea.body.id)
  const q = `/profitstream/v2/api/sources/metrics/tool/events?transactionId=${encodeURIComponent(body.transactionId as string)}`
  t.equal((await call(m.url + q, { key: b })).body._embedded.toolEventMetricResourceList[0].id, eb.body.id)
})

t.test('a team belongs to one account; keys create says which account it used', async (t) => {
  const dir = tempDir('meterd-identity-')
  t.teardown(() => removeDir(dir))
  const cli = (...args: string[]) =>
    run(process.execPath, [join(PACKAGE_ROOT, 'bin', 'meterd.js'), 'keys', 'create', ...args], { env: { ...process.env, METERD_DATA_DIR: dir } })

  const defaulted = await cli('--team', 'team-a', '--scopes', 'metering:write', '--init')
  t.match(defaulted.stdout, /account default \(the default; choose one with --account\)/, 'a defaulted account is said so')
  const given = await cli('--team', 'team-b', '--account', 'acme', '--scopes', 'metering:write')
  t.match(given.stdout, /account acme, team team-b/)
  const joined = JSON.parse((await cli('--team', 'team-b', '--scopes', 'analytics:read', '--json')).stdout)
  t.match(joined, { account: 'acme', team: 'team-b', accountChosen: 'team' }, "without --account a team's next key joins the team's account")
  const human = await cli('--team', 'team-b', '--scopes', 'analytics:read')
  t.match(human.stdout, /account acme \(the account of team team-b\)/)

  const refused = await cli('--team', 'team-b', '--account', 'other', '--scopes', 'metering:write').then(
    () => undefined,
    (err) => err,
  )
  t.ok(refused, 'a team already used under another account is refused')
  t.equal(refused.code, 64, 'as bad usage (exit 64), as a wrong --account is')
  t.match(refused.stderr, /team "team-b" belongs to account "acme"/)

  const store = new Store({ path: dir })
  t.teardown(() => store.close())
  t.equal(new KeyStore(store).list().filter((k) => k.team === 'team-b').length, 3, 'no key was made for the refused call')
  await t.rejects(new KeyStore(store).create({ team: 'x'.repeat(256), scopes: ['admin'] }), /1 to 255 characters/, 'team names are bounded: they are part of every index key')
})

t.test('a team that reads the same as an existing one but is other code points is refused, naming both spellings', async (t) => {
  const dir = tempDir('meterd-identity-')
  t.teardown(() => removeDir(dir))
  const cli = (...args: string[]) =>
    run(process.execPath, [join(PACKAGE_ROOT, 'bin', 'meterd.js'), 'keys', 'create', ...args], { env: { ...process.env, METERD_DATA_DIR: dir } })
  const composed = 'caf\u00e9'
  const decomposed = 'cafe\u0301'
  await cli('--team', composed, '--account', 'acme', '--scopes', 'metering:write', '--init')
  // Before, this made a second team "café" in account "evil", which no listing told apart from acme's.
  const refused = await cli('--team', decomposed, '--account', 'evil', '--scopes', 'metering:write').then(
    () => undefined,
    (err) => err,
  )
  t.ok(refused, 'refused')
  t.equal(refused.code, 64, 'exit 64')
  t.match(refused.stderr, /reads the same as the existing team .* \(cafeU\+0301, not cafU\+00E9\)/)
  const again = JSON.parse((await cli('--team', composed, '--scopes', 'analytics:read', '--json')).stdout)
  t.match(again, { team: composed, account: 'acme' }, 'the existing spelling still gets keys')
  const store = new Store({ path: dir })
  t.teardown(() => store.close())
  t.same(new KeyStore(store).list().map((k) => k.team), [composed, composed], 'no key was made for the look-alike')
})
