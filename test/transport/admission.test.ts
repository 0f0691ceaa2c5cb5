/**
 * Admission without HTTP: the module a gRPC server will call with its call metadata. A request
 * is described by a plain object (headers from a Map, as gRPC metadata reads), and the running
 * daemon's own apikeys and ratelimit extensions decide.
 */
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import type { AdmissionRequest, Principal, RateLimitBucket, Scope } from '../../src/transport/admission/index.js'
import { startMeterd } from '../helpers/meterd.js'

const T0 = 1_800_000_000_000

/** What a gRPC server would build from a call: metadata by lower-case name, the peer address. */
function metadataRequest(entries: Record<string, string>, opts: { bucket?: RateLimitBucket | null; scope?: Scope | null; apiKey?: string; ip?: string } = {}) {
  const metadata = new Map(Object.entries(entries))
  const req: AdmissionRequest & { principal?: Principal } = {
    header: (name) => metadata.get(name),
    apiKey: opts.apiKey,
    ip: opts.ip ?? '10.0.0.7',
    bucket: opts.bucket === undefined ? 'metering' : opts.bucket,
    scope: opts.scope === undefined ? 'metering:write' : opts.scope,
    responseHeaders: {},
  }
  return req
}

t.test('a request described without HTTP is authenticated, counted and scoped by the daemon’s extensions', async (t) => {
  const m = await startMeterd(t, { frozenNow: T0, config: { extensions: { ratelimit: { limits: { metering: 3 } } } } })
  const key = await m.key({ team: 'team-grpc', account: 'acct-grpc', scopes: ['metering:write'] })
  const admission = m.service.admission

  const ok = metadataRequest({ 'x-api-key': key })
  t.equal(await admission.admit(ok), undefined, 'admitted')
  t.match(ok.principal, { account: 'acct-grpc', team: 'team-grpc', scopes: ['metering:write'] }, 'the principal is the key’s')
  t.same(ok.responseHeaders, { 'x-ratelimit-limit': '3', 'x-ratelimit-remaining': '2', 'x-ratelimit-reset': String(T0 / 1000 + 1), 'x-ratelimit-bucket': 'metering' }, 'the rate-limit headers to send')

  const bearer = metadataRequest({ authorization: `Bearer ${key}` })
  t.equal(await admission.admit(bearer), undefined, 'authorization: Bearer works as in HTTP')
  const fromBody = metadataRequest({}, { apiKey: key })
  t.equal(await admission.admit(fromBody), undefined, 'a key found in the payload (OTLP resource attribute) works when no header has one')
  t.equal(fromBody.principal?.team, 'team-grpc')

  const over = metadataRequest({ 'x-api-key': key })
  const limited = await admission.admit(over)
  t.match(limited, { status: 429, code: 'rate_limit_exceeded', headers: { 'x-ratelimit-limited-reason': 'bucket-rate' } }, 'the fourth in the second is over the limit of 3')
  t.equal(over.responseHeaders['x-ratelimit-remaining'], '0')

  m.clock.advance(1000)
  const wrongScope = metadataRequest({ 'x-api-key': key }, { scope: 'analytics:read', bucket: 'analytics' })
  t.match(await admission.admit(wrongScope), { status: 403, code: 'insufficient_scope' }, 'a key without the scope is refused')
  t.equal(wrongScope.responseHeaders['x-ratelimit-bucket'], 'analytics', 'after it was counted against the bucket')

  t.match(await admission.admit(metadataRequest({})), { status: 401, code: 'missing_api_key', message: /Authorization: Bearer$/ })
  // An Authorization header meterd reads as no key: the answer says why, without echoing its value.
  t.match(await admission.admit(metadataRequest({ authorization: 'Bearer hak_a hak_b' })), { status: 401, code: 'missing_api_key', message: /must be `Bearer <key>`.*no spaces/ })
  const basic = await admission.admit(metadataRequest({ authorization: 'Basic dXNlcjpwYXNz' }))
  t.match(basic, { status: 401, code: 'missing_api_key', message: /scheme is not Bearer/ })
  t.notMatch((basic as { message: string }).message, 'dXNlcjpwYXNz', 'the value is not echoed')
  t.match(await admission.admit(metadataRequest({ 'x-api-key': 'hak_nope_00000000000000000000' })), { status: 401, code: 'invalid_api_key' })
  const pub = metadataRequest({}, { bucket: null, scope: null })
  t.equal(await admission.admit(pub), undefined, 'no bucket: a public route, no key needed')
  t.same(pub.responseHeaders, {}, 'and no rate-limit headers')
})

t.test('error-pattern accounting through observe(): an IP that keeps failing is blocked on every transport', async (t) => {
  const m = await startMeterd(t, { frozenNow: T0, config: { extensions: { ratelimit: { error_pattern: { threshold: 5 } } } } })
  const admission = m.service.admission
  for (let i = 0; i < 5; i++) {
    const req = metadataRequest({ 'x-api-key': 'hak_nope_00000000000000000000' }, { ip: '10.9.9.9' })
    const refused = await admission.admit(req)
    admission.observe(req, refused!.status)
  }
  const blocked = await admission.admit(metadataRequest({}, { ip: '10.9.9.9' }))
  t.match(blocked, { status: 429, headers: { 'x-ratelimit-limited-reason': 'error-pattern' } }, 'the sixth gets 429 instead of 401')
  t.match(await admission.admit(metadataRequest({}, { ip: '10.9.9.10' })), { status: 401 }, 'another IP is not blocked')
})

t.test('the admission module does not depend on node:http', async (t) => {
  const dir = join(PACKAGE_ROOT, 'src', 'transport', 'admission')
  for (const f of readdirSync(dir)) t.notMatch(readFileSync(join(dir, f), 'utf8'), /from '(node:)?http'|transport\/http/, `${f} imports nothing of HTTP`)
})
