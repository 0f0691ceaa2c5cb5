/**
 * Rate limits with the memory backend (the default config): buckets, headers on every
 * status, accounts, error-pattern blocks. The clock is frozen; tests move it.
 */
import t, { type Test } from 'tap'
import { ApiError } from '../../src/core/errors.js'
import type { Scope } from '../../src/transport/http/server.js'
import { call, startMeterd, type Meterd, type Res } from '../helpers/meterd.js'
import { completion } from '../fixtures/wire-examples.js'

const T0 = 1_800_000_000_000 // aligned to an epoch second
const COMPLETIONS = '/meter/v2/ai/completions'
const ANALYTICS = '/profitstream/v2/api/sources/metrics/ai/completions'
const PROBE = '/profitstream/v2/api/ratelimit-probe'
const SCOPES: Scope[] = ['metering:write', 'analytics:read', 'platform:read', 'platform:write']

/** A platform route that answers what the test asks for (the platform API itself is other work). */
function mountProbe(m: Meterd): void {
  m.service.http.route({
    method: 'GET',
    path: PROBE,
    bucket: 'platform',
    scope: 'platform:read',
    handler: (ctx) => {
      const status = Number(ctx.query.get('status') ?? 200)
      if (status === 503) throw new Error('probe failure')
      return status === 204 ? { status } : { status, body: { ok: true } }
    },
  })
}

/** Runs `n` requests, `parallel` at a time, in order of start. */
async function many(n: number, parallel: number, one: (i: number) => Promise<Res>): Promise<Res[]> {
  const out: Res[] = new Array(n)
  let next = 0
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (next < n) {
        const i = next++
        out[i] = await one(i)
      }
    }),
  )
  return out
}

const seconds = (now: number) => Math.floor(now / 1000)

function bucketRateBody(res: Res, bucket: string) {
  return {
    error: {
      type: 'rate_limit_error',
      code: 'rate_limit_exceeded',
      message: res.body?.error?.message,
      doc_url: res.body?.error?.doc_url,
      bucket,
    },
  }
}

function checkRateHeaders(t: Test, res: Res, bucket: string, limit: number, reset: number, what: string) {
  t.equal(res.headers.get('x-ratelimit-limit'), String(limit), `${what}: X-RateLimit-Limit`)
  t.equal(res.headers.get('x-ratelimit-bucket'), bucket, `${what}: X-RateLimit-Bucket`)
  t.equal(res.headers.get('x-ratelimit-reset'), String(reset), `${what}: X-RateLimit-Reset`)
  const remaining = Number(res.headers.get('x-ratelimit-remaining'))
  t.ok(Number.isInteger(remaining) && remaining >= 0 && remaining <= limit, `${what}: X-RateLimit-Remaining ${remaining} in 0..${limit}`)
}

t.test('each bucket at 3× its limit in one window admits exactly the limit; the next window admits again', async (t) => {
  const m = await startMeterd(t, { frozenNow: T0 })
  mountProbe(m)
  const key = await m.key({ account: 'acct-buckets' })
  const cases = [
    { bucket: 'metering', limit: 1000, send: () => call(m.url + COMPLETIONS, { key, body: completion() }), ok: 201 },
    { bucket: 'analytics', limit: 100, send: () => call(m.url + ANALYTICS, { key }), ok: 200 },
    { bucket: 'platform', limit: 50, send: () => call(m.url + PROBE, { key }), ok: 200 },
  ]
  for (const c of cases) {
    await t.test(c.bucket, async (t) => {
      const reset = seconds(m.clock.now) + 1
      const results = await many(3 * c.limit, 16, () => c.send())
      const admitted = results.filter((r) => r.status === c.ok)
      const limited = results.filter((r) => r.status === 429)
      t.equal(admitted.length, c.limit, `exactly ${c.limit} admitted`)
      t.equal(limited.length, 2 * c.limit, 'the rest get 429')
      t.same(
        admitted.map((r) => Number(r.headers.get('x-ratelimit-remaining'))).sort((a, b) => a - b),
        Array.from({ length: c.limit }, (_, i) => i),
        'admitted answers count Remaining down from limit-1 to 0, each value once',
      )
      let allGood = true
      for (const r of limited) {
        const good =
          r.headers.get('retry-after') === '1' &&
          r.headers.get('x-ratelimit-limited-reason') === 'bucket-rate' &&
          r.headers.get('x-ratelimit-limit') === String(c.limit) &&
          r.headers.get('x-ratelimit-remaining') === '0' &&
          r.headers.get('x-ratelimit-reset') === String(reset) &&
          r.headers.get('x-ratelimit-bucket') === c.bucket &&
          Object.keys(r.body.error).sort().join() === 'bucket,code,doc_url,message,type' &&
          r.body.error.type === 'rate_limit_error' &&
          r.body.error.code === 'rate_limit_exceeded' &&
          r.body.error.bucket === c.bucket &&
          typeof r.body.error.message === 'string' &&
          r.body.error.message.length > 0 &&
          /^https?:\/\//.test(r.body.error.doc_url)
        if (!good && allGood) t.fail('a 429 lacks a header or has another body', { headers: Object.fromEntries(r.headers), body: r.body })
        allGood &&= good
      }
      t.ok(allGood, `all ${limited.length} refusals carry every header and SPEC's exact body`)
      t.same(limited[0].body, bucketRateBody(limited[0], c.bucket), 'body is exactly {error:{type,code,message,doc_url,bucket}}')

      m.clock.advance(1000)
      const next = await c.send()
      t.equal(next.status, c.ok, 'the next window admits again')
      t.equal(next.headers.get('x-ratelimit-remaining'), String(c.limit - 1))
      t.equal(next.headers.get('x-ratelimit-reset'), String(reset + 1))
    })
  }
})

t.test('a window is the epoch second: late in a second, the limit still resets at the second boundary', async (t) => {
  const m = await startMeterd(t, { frozenNow: T0 + 999, config: { extensions: { ratelimit: { limits: { platform: 2 } } } } })
  mountProbe(m)
  const key = await m.key()
  await call(m.url + PROBE, { key })
  await call(m.url + PROBE, { key })
  const over = await call(m.url + PROBE, { key })
  t.equal(over.status, 429)
  t.equal(over.headers.get('retry-after'), '1', 'Retry-After is at least 1 even with 1 ms left')
  t.equal(over.headers.get('x-ratelimit-reset'), String(seconds(T0) + 1))
  m.clock.advance(1)
  const fresh = await call(m.url + PROBE, { key })
  t.equal(fresh.status, 200, 'one millisecond later is a new window')
  t.equal(fresh.headers.get('x-ratelimit-reset'), String(seconds(T0) + 2))
})

t.test('rate-limit headers on every status of an authenticated bucket request, none on operations routes', async (t) => {
  const m = await startMeterd(t, { frozenNow: T0, config: { extensions: { ratelimit: { limits: { analytics: 3 } } } } })
  mountProbe(m)
  const key = await m.key()
  const meteringOnly = await m.key({ scopes: ['metering:write'] })
  const reset = seconds(T0) + 1
  const checks: [string, Promise<Res>, number, string, number][] = [
    ['201', call(m.url + COMPLETIONS, { key, body: completion() }), 201, 'metering', 1000],
    ['400', call(m.url + COMPLETIONS, { key, body: { ...completion(), model: undefined } }), 400, 'metering', 1000],
    ['404', call(m.url + '/profitstream/v2/api/no-such-thing', { key }), 404, 'platform', 50],
    ['403', call(m.url + ANALYTICS, { key: meteringOnly }), 403, 'analytics', 3],
    ['204', call(m.url + PROBE + '?status=204', { key }), 204, 'platform', 50],
    ['5xx', call(m.url + PROBE + '?status=503', { key }), 503, 'platform', 50],
  ]
  for (const [what, p, status, bucket, limit] of checks) {
    const res = await p
    t.equal(res.status, status, `${what}: status`)
    checkRateHeaders(t, res, bucket, limit, reset, what)
  }
  t.equal((await call(m.url + ANALYTICS, { key })).status, 200)
  const last = await call(m.url + ANALYTICS, { key })
  t.equal(last.status, 200, 'the 403 counted too: this is the third and last of the window')
  t.equal(last.headers.get('x-ratelimit-remaining'), '0')
  const limited = await call(m.url + ANALYTICS, { key })
  t.equal(limited.status, 429, '429')
  checkRateHeaders(t, limited, 'analytics', 3, reset, '429')
  t.equal(limited.headers.get('x-ratelimit-remaining'), '0')

  for (const path of ['/healthz', '/readyz', '/metrics']) {
    const res = await call(m.url + path, { key })
    t.equal(res.status, 200, path)
    t.notOk(res.headers.has('x-ratelimit-limit') || res.headers.has('x-ratelimit-bucket'), `${path}: no rate-limit headers`)
  }
  const anon = await call(m.url + COMPLETIONS, { body: completion() })
  t.equal(anon.status, 401)
  t.notOk(anon.headers.has('x-ratelimit-limit'), 'an unauthenticated 401 carries no rate-limit headers')
})

t.test('keys of one account share its buckets; accounts do not; per-account limits apply', async (t) => {
  const m = await startMeterd(t, {
    frozenNow: T0,
    config: { extensions: { ratelimit: { limits: { platform: 5 }, accounts: { big: { platform: 8 } } } } },
  })
  mountProbe(m)
  const a1 = await m.key({ account: 'acct-a', team: 'team-1' })
  const a2 = await m.key({ account: 'acct-a', team: 'team-2' })
  const b = await m.key({ account: 'acct-b' })
  const big = await m.key({ account: 'big' })
  const statuses = async (key: string, n: number) => (await many(n, 1, () => call(m.url + PROBE, { key }))).map((r) => r.status)
  t.same(await statuses(a1, 3), [200, 200, 200])
  t.same(await statuses(a2, 3), [200, 200, 429], 'the second key of the account gets what the first left: 2')
  t.same(await statuses(a1, 1), [429])
  t.same(await statuses(b, 6), [200, 200, 200, 200, 200, 429], 'another account has its own 5')
  const bigRes = await many(9, 1, () => call(m.url + PROBE, { key: big }))
  t.same(bigRes.map((r) => r.status), [200, 200, 200, 200, 200, 200, 200, 200, 429], 'an account with an override gets 8')
  t.equal(bigRes[0].headers.get('x-ratelimit-limit'), '8')
  const metering = await call(m.url + COMPLETIONS, { key: a1, body: completion() })
  t.equal(metering.status, 201, 'an exhausted platform bucket leaves metering alone')

  const metrics = (await call(m.url + '/metrics')).text
  t.match(metrics, /meterd_ratelimit_requests_total\{bucket="platform",decision="limited",reason="bucket-rate"\} 4/)
  t.match(metrics, /meterd_ratelimit_requests_total\{bucket="platform",decision="allowed",reason="none"\} 18/)
})

t.test('error-pattern: 50 4xx in 10 s block; cooldowns 30 → 60 → … capped at 3600; clears by itself', async (t) => {
  const m = await startMeterd(t, { frozenNow: T0 })
  const key = await m.key({ account: 'acct-errors' })
  const bad = () => call(m.url + COMPLETIONS, { key, body: { ...completion(), provider: '' } })
  const good = () => call(m.url + COMPLETIONS, { key, body: completion() })
  const fail = async (n: number) => {
    const res = await many(n, 8, bad)
    return res.every((r) => r.status === 400)
  }

  // Below the threshold in any 10 s: never blocked.
  t.ok(await fail(49), '49 bad requests are answered 400')
  m.clock.advance(10_000)
  t.ok(await fail(1), 'one more, 10 s after the first 49')
  t.equal((await good()).status, 201, '49 + 1 spread over more than 10 s do not block')
  m.clock.advance(10_000)

  const expected = [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]
  for (const [i, cooldown] of expected.entries()) {
    t.ok(await fail(50), `violation ${i + 1}: 50 bad requests answered 400`)
    const blocked = await good()
    t.equal(blocked.status, 429, `violation ${i + 1}: blocked, even a good request`)
    t.equal(blocked.headers.get('retry-after'), String(cooldown), `violation ${i + 1}: cooldown ${cooldown} s`)
    t.equal(blocked.headers.get('x-ratelimit-limited-reason'), 'error-pattern')
    if (i === 0) {
      t.same(Object.keys(blocked.body.error).sort(), ['code', 'doc_url', 'message', 'type'], 'no bucket field with error-pattern')
      t.equal(blocked.body.error.type, 'rate_limit_error')
      t.equal(blocked.body.error.code, 'rate_limit_exceeded')
      checkRateHeaders(t, blocked, 'metering', 1000, seconds(m.clock.now) + 1, 'error-pattern 429')
      const before = blocked.headers.get('x-ratelimit-remaining')
      const again = await good()
      t.equal(again.headers.get('x-ratelimit-remaining'), before, 'blocked requests do not consume the bucket')
      t.equal(before, String(1000 - 50), 'remaining counts only the requests that were admitted')
      m.clock.advance(10_000)
      t.equal((await good()).headers.get('retry-after'), '20', 'Retry-After is the remaining cooldown')
      m.clock.advance(cooldown * 1000 - 10_001)
      t.equal((await good()).headers.get('retry-after'), '1', '1 ms left still says 1 s')
      m.clock.advance(1)
    } else {
      m.clock.advance(cooldown * 1000)
    }
    t.equal((await good()).status, 201, `violation ${i + 1}: cleared after ${cooldown} s`)
  }

  // A violation more than one cooldown after the last block ended starts over at 30 s.
  m.clock.advance(3600_000 + 1000)
  t.ok(await fail(50))
  t.equal((await good()).headers.get('retry-after'), '30', 'not consecutive: back to 30 s')
  m.clock.advance(30_000)

  // A caller that fixes its requests recovers and stays unblocked.
  const fixed = await many(200, 8, good)
  t.ok(fixed.every((r) => r.status === 201), 'good requests after the block are all accepted')
  m.clock.advance(60_000)
  t.ok(await fail(10), 'an occasional error is fine')
  t.equal((await good()).status, 201)
})

t.test('error-pattern by client IP for unauthenticated callers; 429 instead of 401 while blocked', async (t) => {
  const m = await startMeterd(t, { frozenNow: T0 })
  const key = await m.key({ account: 'acct-ip' })
  const anon = () => call(m.url + COMPLETIONS, { key: 'hak_not_a_real_key_not_a_real_key_00', body: completion() })
  const res = await many(50, 8, anon)
  t.ok(res.every((r) => r.status === 401), '50 × 401')
  const blocked = await anon()
  t.equal(blocked.status, 429, 'the 51st unauthenticated request is blocked')
  t.equal(blocked.headers.get('x-ratelimit-limited-reason'), 'error-pattern')
  t.equal(blocked.headers.get('retry-after'), '30')
  t.same(Object.keys(blocked.body.error).sort(), ['code', 'doc_url', 'message', 'type'])
  t.notOk(blocked.headers.has('x-ratelimit-limit'), 'no bucket headers without an account')
  const noKey = await call(m.url + ANALYTICS)
  t.equal(noKey.status, 429, 'a request without any key from that IP is blocked too')
  const authed = await call(m.url + COMPLETIONS, { key, body: completion() })
  t.equal(authed.status, 201, 'an authenticated caller is counted by account, not IP')
  m.clock.advance(30_000)
  t.equal((await anon()).status, 401, 'after the cooldown the IP gets its 401 again')
})

t.test('error_pattern.enabled: false never blocks; thresholds are configurable', async (t) => {
  const m = await startMeterd(t, {
    frozenNow: T0,
    config: { extensions: { ratelimit: { error_pattern: { threshold: 5, window_seconds: 2, initial_cooldown_seconds: 7 } } } },
  })
  const key = await m.key()
  const bad = () => call(m.url + COMPLETIONS, { key, body: { ...completion(), provider: '' } })
  for (let i = 0; i < 5; i++) await bad()
  const blocked = await call(m.url + COMPLETIONS, { key, body: completion() })
  t.equal(blocked.status, 429)
  t.equal(blocked.headers.get('retry-after'), '7')

  const off = await startMeterd(t, { frozenNow: T0, config: { extensions: { ratelimit: { error_pattern: { enabled: false } } } } })
  const k2 = await off.key()
  const res = await many(120, 8, () => call(off.url + COMPLETIONS, { key: k2, body: { ...completion(), provider: '' } }))
  t.ok(res.every((r) => r.status === 400), '120 × 400, never 429')
})

t.test('the 429 helpers build the error shape with ApiError', async (t) => {
  const { bucketRate, errorPattern } = await import('../../src/extensions/ratelimit/index.js')
  const e = bucketRate('analytics', 100, 1)
  t.ok(e instanceof ApiError)
  t.same(e.headers, { 'retry-after': '1', 'x-ratelimit-limited-reason': 'bucket-rate' })
  t.equal(errorPattern(1_500).headers['retry-after'], '2', 'Retry-After rounds up')
})

t.test('client_ip_header: unauthenticated callers behind a proxy are told apart by the forwarded address', async (t) => {
  const m = await startMeterd(t, { frozenNow: T0, config: { extensions: { ratelimit: { client_ip_header: 'x-forwarded-for' } } } })
  const from = (ip: string) => () => call(m.url + COMPLETIONS, { body: completion(), headers: { 'x-forwarded-for': `${ip}, 10.0.0.1` } })
  const a = await many(50, 8, from('203.0.113.7'))
  t.ok(a.every((r) => r.status === 401))
  t.equal((await from('203.0.113.7')()).status, 429, 'the first forwarded address is blocked')
  t.equal((await from('198.51.100.9')()).status, 401, 'another client behind the same proxy is not')
})
