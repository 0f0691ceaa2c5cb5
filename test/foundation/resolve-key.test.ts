/** Issue 15 #21: the setup tools' key check answers who the key is, never the key. */
import t from 'tap'
import { call, startMeterd } from '../helpers/meterd.js'

t.test('GET /v2/sdk/resolve-key: 200 with the key’s identity for any valid key, in the platform bucket', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key({ team: 'team-r', account: 'acct-r', tenant: 'tenant-r', environment: 'staging', scopes: ['metering:write'] })
  const res = await call(m.url + '/v2/sdk/resolve-key', { key })
  t.equal(res.status, 200, 'a metering-only key may check itself')
  t.match(res.body, { keyId: /^key_/, account: 'acct-r', tenant: 'tenant-r', team: 'team-r', environment: 'staging', scopes: ['metering:write'], teamId: 'team-r', tenantId: 'tenant-r' })
  t.notMatch(res.text, key, 'the key itself is never in the answer')
  t.notMatch(res.text, key.slice(-20))
  t.equal(res.headers.get('x-ratelimit-bucket'), 'platform')
  t.equal(res.headers.get('cache-control'), 'no-store')
  const bearer = await call(m.url + '/v2/sdk/resolve-key', { headers: { authorization: `Bearer ${key}` } })
  t.equal(bearer.status, 200)
  t.equal((await call(m.url + '/v2/sdk/resolve-key')).status, 401, 'no key: 401')
  t.equal((await call(m.url + '/v2/sdk/resolve-key', { key: 'hak_nope_000000000000000000000' })).status, 401, 'a wrong key: 401')
})
