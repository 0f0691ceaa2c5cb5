/**
 * The HTTP transport: routes declare their bucket; paths without a route are admitted like the
 * routes of their family before they are answered; HTTP-level bad input gets the error shape.
 */
import { connect } from 'node:net'
import pino from 'pino'
import t from 'tap'
import { Admission } from '../../src/transport/admission/index.js'
import { HttpServer } from '../../src/transport/http/server.js'
import { call, startMeterd } from '../helpers/meterd.js'
import { completion } from '../fixtures/wire-examples.js'

const C = '/meter/v2/ai/completions'
const T0 = 1_800_000_000_000

/** Sends raw bytes and returns what came back before the server closed or went quiet. */
function rawRequest(url: string, bytes: string | Buffer): Promise<string> {
  const { port } = new URL(url)
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), '127.0.0.1')
    let out = ''
    const done = () => {
      socket.destroy()
      resolve(out)
    }
    socket.setTimeout(1000, done)
    socket.on('data', (d) => {
      out += d
      if (/\r\n\r\n/.test(out)) {
        const len = Number(/content-length: (\d+)/i.exec(out)?.[1] ?? 0)
        if (Buffer.byteLength(out.slice(out.indexOf('\r\n\r\n') + 4)) >= len) done()
      }
    })
    socket.on('end', done)
    socket.on('error', reject)
    socket.write(bytes)
  })
}

t.test('a path without a route under a family: the key first, counted in the family’s bucket, then 404', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const cases = [
    ['/meter/v2/ai/nothing', 'metering'],
    ['/v2/otlp/v9/nothing', 'metering'],
    ['/v2/sdk/nothing', 'platform'],
    ['/profitstream/v2/api/tools/a/b/c/d', 'platform'],
    ['/profitstream/nothing', 'platform'],
  ]
  for (const [path, bucket] of cases) {
    const anonymous = await call(m.url + path)
    t.equal(anonymous.status, 401, `${path} without a key: 401, as its existing neighbours answer`)
    t.equal(anonymous.body.error.code, 'missing_api_key')
    const known = await call(m.url + path, { key })
    t.equal(known.status, 404, `${path} with a key: 404`)
    t.equal(known.body.error.code, 'route_not_found')
    t.equal(known.headers.get('x-ratelimit-bucket'), bucket, `${path} counts against ${bucket}`)
  }
  const outside = await call(m.url + '/favicon.ico')
  t.equal(outside.status, 404, 'outside every family: 404 without a key (nothing there to hide)')
  t.notOk(outside.headers.has('x-ratelimit-bucket'))
})

t.test('an IP scanning unknown paths is counted and blocked like any failing caller', async (t) => {
  const m = await startMeterd(t, { frozenNow: T0, config: { extensions: { ratelimit: { error_pattern: { threshold: 10 } } } } })
  for (let i = 0; i < 10; i++) t.equal((await call(`${m.url}/scan-${i}`)).status, 404)
  const blocked = await call(m.url + '/profitstream/v2/api/tools')
  t.equal(blocked.status, 429, 'ten 404s outside every family block the IP')
  t.equal(blocked.headers.get('x-ratelimit-limited-reason'), 'error-pattern')
  t.equal((await call(m.url + '/healthz')).status, 200, 'health checks still answer')
})

t.test('405 answers carry Allow, after admission', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const anonymous = await call(m.url + C, { method: 'GET' })
  t.equal(anonymous.status, 401, 'the key is checked first')
  const res = await call(m.url + C, { method: 'GET', key })
  t.equal(res.status, 405)
  t.equal(res.body.error.code, 'method_not_allowed')
  t.equal(res.headers.get('allow'), 'POST')
  t.equal(res.headers.get('x-ratelimit-bucket'), 'metering')
  const tools = await call(m.url + '/profitstream/v2/api/tools', { method: 'DELETE', key })
  t.equal(tools.status, 405)
  t.equal(tools.headers.get('allow'), 'GET, POST, HEAD')
  const health = await call(m.url + '/healthz', { method: 'POST' })
  t.equal(health.status, 405)
  t.equal(health.headers.get('allow'), 'GET, HEAD')
})

t.test('a request without Host gets a 400 in the error shape', async (t) => {
  const m = await startMeterd(t)
  const out = await rawRequest(m.url, 'GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n')
  t.match(out, /^HTTP\/1\.1 400 /)
  const body = JSON.parse(out.slice(out.indexOf('\r\n\r\n') + 4))
  t.match(body, { error: { type: 'invalid_request_error', code: 'missing_host', param: 'Host' } })
  const http10 = await rawRequest(m.url, 'GET /healthz HTTP/1.0\r\n\r\n')
  t.match(http10, /^HTTP\/1\.1 200 /, 'HTTP/1.0 needs no Host')
})

t.test('a request target in absolute form (http://host/path) is routed as its path, as RFC 9112 requires of a server', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const body = JSON.stringify(completion())
  const out = await rawRequest(
    m.url,
    `POST ${m.url}${C}?teamId=team-a HTTP/1.1\r\nHost: x\r\nx-api-key: ${key}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  )
  t.match(out, /^HTTP\/1\.1 201 /, 'the record is taken')
  const list = await call(m.url + '/profitstream/v2/api/sources/metrics/ai/completions', { key })
  t.equal(list.body.page.totalElements, 1, 'and stored')
  const health = await rawRequest(m.url, 'GET HTTP://127.0.0.1/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
  t.match(health, /^HTTP\/1\.1 200 /, 'any case of scheme')
  const root = await rawRequest(m.url, 'GET http://127.0.0.1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
  t.match(root, /^HTTP\/1\.1 404 /, 'an authority alone is the path /')
  t.match(root, /no route GET \/"/)
})

t.test('CONNECT (a client taking meterd for a proxy) gets a 405 in the error shape, not a connection dropped without an answer', async (t) => {
  const m = await startMeterd(t)
  const out = await rawRequest(m.url, 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n')
  t.match(out, /^HTTP\/1\.1 405 Method Not Allowed\r\n/)
  t.match(out, /connection: close/i)
  t.match(JSON.parse(out.slice(out.indexOf('\r\n\r\n') + 4)), {
    error: { type: 'invalid_request_error', code: 'method_not_allowed', message: /CONNECT is not supported/, doc_url: 'http://example.com:443/docs/errors#method_not_allowed' },
  })
})

t.test('an Expect other than 100-continue gets a 417 in the error shape, and nothing is stored', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const body = JSON.stringify(completion())
  const head = (expect: string) =>
    `POST ${C} HTTP/1.1\r\nHost: x\r\nx-api-key: ${key}\r\ncontent-type: application/json\r\nExpect: ${expect}\r\ncontent-length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n`
  const out = await rawRequest(m.url, head('something-else') + body)
  t.match(out, /^HTTP\/1\.1 417 /)
  t.match(out, /content-type: application\/json/i)
  t.match(JSON.parse(out.slice(out.indexOf('\r\n\r\n') + 4)), {
    error: { type: 'invalid_request_error', code: 'expectation_failed', param: 'Expect', message: /Expect: something-else is not supported/, doc_url: 'http://x/docs/errors#expectation_failed' },
  })
  const list = await call(m.url + '/profitstream/v2/api/sources/metrics/ai/completions', { key })
  t.equal(list.body.page.totalElements, 0, 'nothing stored')
  // Read to the close: rawRequest would stop after the interim 100, which has no body.
  const cont = await new Promise<string>((resolve, reject) => {
    let got = ''
    const socket = connect(Number(new URL(m.url).port), '127.0.0.1')
    socket.on('data', (d) => (got += d))
    socket.on('end', () => resolve(got))
    socket.on('error', reject)
    socket.write(head('100-continue') + body)
  })
  t.match(cont, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 201 /, '100-continue still works')
})

t.test('headers past 16 KiB get a 431 in the error shape, not a 400 saying the HTTP is malformed', async (t) => {
  const m = await startMeterd(t)
  for (const [what, headers] of [
    ['one long header', `X-Big: ${'a'.repeat(20_000)}\r\n`],
    ['very many headers', Array.from({ length: 3000 }, (_, i) => `X-H${i}: 1\r\n`).join('')],
  ] as const) {
    const out = await rawRequest(m.url, `GET /healthz HTTP/1.1\r\nHost: x\r\n${headers}Connection: close\r\n\r\n`)
    t.match(out, /^HTTP\/1\.1 431 Request Header Fields Too Large\r\n/, what)
    t.match(JSON.parse(out.slice(out.indexOf('\r\n\r\n') + 4)), { error: { type: 'invalid_request_error', code: 'headers_too_large', doc_url: /\/docs\/errors#headers_too_large$/ } }, what)
  }
  const bad = await rawRequest(m.url, 'GET /healthz HTTP/1.1\r\nHost x\r\n\r\n')
  t.match(bad, /^HTTP\/1\.1 400 /, 'a malformed header line is still bad_http')
  t.match(bad, /"code":"bad_http"/)
  // On a kept-alive connection whose last request was answered before Node parsed its end (a GET
  // answered at once), the next request's error is answered too, not dropped with the connection.
  const kept = await piecewise(m.url, ['GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n', `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`])
  t.match(kept, /^HTTP\/1\.1 200 [^]*HTTP\/1\.1 431 /, 'the second request of a kept-alive connection gets its 431')
})

t.test('a request target past the limit gets 414 uri_too_long, headers past it 431, however the bytes arrive', async (t) => {
  const m = await startMeterd(t)
  const target = `/healthz?q=${'a'.repeat(20_000)}`
  const longTarget = `GET ${target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`
  const longHeader = `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'b'.repeat(20_000)}\r\nConnection: close\r\n\r\n`
  const longName = `GET /healthz HTTP/1.1\r\nHost: x\r\nX-${'n'.repeat(20_000)}: v\r\nConnection: close\r\n\r\n`
  const keptAlive = `GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n`
  for (const [what, pieces, status, code] of [
    ['a long target in one write', [longTarget], 414, 'uri_too_long'],
    // The parser fails in the second read, which holds neither the request line's start nor a line feed before the target's end.
    ['a long target in two writes', [longTarget.slice(0, 10_000), longTarget.slice(10_000)], 414, 'uri_too_long'],
    ['a long target on a kept-alive connection', [keptAlive, longTarget], 414, 'uri_too_long'],
    ['a long header in one write', [longHeader], 431, 'headers_too_large'],
    ['a long header in two writes', [longHeader.slice(0, 10_000), longHeader.slice(10_000)], 431, 'headers_too_large'],
    ['a long header name in two writes', [longName.slice(0, 10_000), longName.slice(10_000)], 431, 'headers_too_large'],
  ] as const) {
    const out = await piecewise(m.url, pieces)
    const answer = out.slice(out.lastIndexOf('HTTP/1.1 '))
    t.match(answer, new RegExp(`^HTTP/1\\.1 ${status} `), what)
    t.match(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)), { error: { type: 'invalid_request_error', code, doc_url: new RegExp(`/docs/errors#${code}$`) } }, what)
  }
})

/** Writes each piece as its own read for the server (a pause between them); what came back by the close. */
function piecewise(url: string, pieces: readonly string[]): Promise<string> {
  const { port } = new URL(url)
  return new Promise((resolve) => {
    const socket = connect(Number(port), '127.0.0.1')
    socket.setNoDelay(true)
    let out = ''
    socket.on('data', (d) => (out += d))
    socket.on('error', () => undefined)
    socket.on('close', () => resolve(out))
    socket.setTimeout(2000, () => socket.destroy())
    void (async () => {
      for (const piece of pieces) {
        if (socket.destroyed) return
        socket.write(piece)
        await new Promise((r) => setTimeout(r, 50))
      }
    })()
  })
}

/** Writes `bytes` and keeps the connection open, silent; what came back by the close, or '' after `waitMs`. */
function stalledRequest(port: number, bytes: string, waitMs: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1')
    let out = ''
    const timer = setTimeout(() => {
      socket.destroy()
      resolve('')
    }, waitMs)
    socket.on('data', (d) => (out += d))
    socket.on('close', () => {
      clearTimeout(timer)
      resolve(out)
    })
    socket.on('error', () => undefined)
    socket.write(bytes)
  })
}

t.test('a request that stops arriving gets a 408 request_timeout in the error shape, not a 400 saying the HTTP is malformed', async (t) => {
  // The daemon's timeout is 60 s (cut 60 to 90 s in): a server of its own with a short one.
  const server = new HttpServer({ apiPrefix: 'p', maxBodyBytes: 1 << 20, maxJsonDepth: 32, logger: pino({ level: 'silent' }), admission: new Admission(), requestTimeoutMs: 1000 })
  server.route({ method: 'POST', path: '/echo', bucket: null, scope: null, handler: async (ctx) => ({ status: 200, body: await ctx.json() }) })
  const { port } = await server.listen('127.0.0.1:0')
  t.teardown(() => server.close(0))
  for (const [what, bytes] of [
    ['headers that stop', 'POST /echo HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n'],
    ['a body that stops', 'POST /echo HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"a":'],
  ]) {
    const out = await stalledRequest(port, bytes, 10_000)
    t.match(out, /^HTTP\/1\.1 408 Request Timeout\r\n/, what)
    t.match(out, /connection: close/i, what)
    t.match(JSON.parse(out.slice(out.indexOf('\r\n\r\n') + 4)), {
      error: { type: 'invalid_request_error', code: 'request_timeout', message: /within 1 s/, doc_url: /\/docs\/errors#request_timeout$/ },
    }, what)
  }
  const whole = await rawRequest(`http://127.0.0.1:${port}`, 'POST /echo HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: 7\r\n\r\n{"a":1}')
  t.match(whole, /^HTTP\/1\.1 200 /, 'a request that arrives in time is answered')
})

t.test('a request already answered (413 as its body began) that then stops arriving gets no second answer on its connection', async (t) => {
  const server = new HttpServer({ apiPrefix: 'p', maxBodyBytes: 1000, maxJsonDepth: 32, logger: pino({ level: 'silent' }), admission: new Admission(), requestTimeoutMs: 1000 })
  server.route({ method: 'POST', path: '/echo', bucket: null, scope: null, handler: async (ctx) => ({ status: 200, body: await ctx.json() }) })
  const { port } = await server.listen('127.0.0.1:0')
  t.teardown(() => server.close(0))
  const out = await stalledRequest(port, `POST /echo HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n${' '.repeat(5000)}`, 10_000)
  t.match(out, /^HTTP\/1\.1 413 /, 'answered 413 at once')
  t.equal(out.split('HTTP/1.1 ').length - 1, 1, 'and only that: a second response would be read as the answer to a next request')
  t.notMatch(out, /request_timeout/)
})

t.test('a 201 create carries Location naming the created resource, which a GET there answers', async (t) => {
  const m = await startMeterd(t, { config: { extensions: { exportconfigs: { allow_private_destinations: ['127.0.0.1'] } } } })
  const key = await m.key()
  const api = '/profitstream/v2/api'
  for (const [what, path, body] of [
    ['a tool', `${api}/tools`, { toolId: 'loc', name: 'Loc', toolType: 'SDK' }],
    ['an export configuration', `${api}/export-configurations`, { name: 'loc', url: 'http://127.0.0.1:9/hook' }],
    ['an export configuration without signing', `${api}/export-configurations`, { name: 'loc2', url: 'http://127.0.0.1:9/hook', signingEnabled: false }],
    ['an alert rule', `${api}/sources/ai/anomaly`, { name: 'Loc', alertType: 'THRESHOLD', metricType: 'TOTAL_COST', operatorType: 'GREATER_THAN', threshold: 1, periodDuration: 'DAILY' }],
  ] as const) {
    const created = await call(m.url + path, { key, body })
    t.equal(created.status, 201, what)
    t.equal(created.headers.get('location'), `${path}/${created.body.id}`, `${what}: Location is the new resource, not the collection`)
    const read = await call(m.url + created.headers.get('location'), { key })
    t.equal(read.status, 200, `${what}: GET at Location finds it`)
    t.equal(read.body.id, created.body.id, what)
  }
})

t.test('ids in paths longer than any id are refused before any store sees them', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const long = 'x'.repeat(5000)
  for (const [path, param] of [
    [`/profitstream/v2/api/tools/${long}`, 'id'],
    [`/profitstream/v2/api/tools/by-tool-id/${long}`, 'toolId'],
    [`/profitstream/v2/api/export-configurations/${long}`, 'id'],
    [`/profitstream/v2/api/export-configurations/x/deliveries/${'é'.repeat(300)}`, 'deliveryId'],
  ]) {
    const res = await call(m.url + path, { key })
    t.equal(res.status, 400, `${path.slice(0, 60)}…: 400, not 503`)
    t.match(res.body.error, { code: 'invalid_parameter', param })
  }
  const fine = await call(`${m.url}/profitstream/v2/api/tools/${'x'.repeat(300)}`, { key })
  t.equal(fine.status, 404, 'a long id that fits is simply not found')
})

t.test('an id in a path that is not valid percent-encoding is a 400 naming it, not a 404 saying there is no such route', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  for (const [method, path, param] of [
    ['GET', '/profitstream/v2/api/tools/%FF', 'id'],
    ['DELETE', '/profitstream/v2/api/tools/%', 'id'],
    ['GET', '/profitstream/v2/api/tools/by-tool-id/%E0%A4%A', 'toolId'],
    ['PUT', '/profitstream/v2/api/export-configurations/a%zz', 'id'],
    ['GET', '/profitstream/v2/api/analytics/traces/%C0%AF', 'traceId'],
  ]) {
    const res = await call(m.url + path, { key, method, ...(method === 'PUT' ? { body: {} } : {}) })
    t.equal(res.status, 400, `${method} ${path}`)
    t.match(res.body.error, { type: 'invalid_request_error', code: 'invalid_parameter', param, message: /not valid percent-encoding/ }, path)
  }
  t.equal((await call(`${m.url}/profitstream/v2/api/tools/%FF`)).status, 401, 'without a key: 401 first, as every route')
  const escaped = await call(`${m.url}/profitstream/v2/api/tools/%25`, { key })
  t.equal(escaped.status, 404, 'an escaped % is an id like any other')
  t.equal(escaped.body.error.code, 'resource_not_found')
})

t.test('a query parameter a route reads that is not valid percent-encoding is a 400 naming it, not a filter on U+FFFD or a literal %', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key({ team: 'team-a' })
  const api = `${m.url}/profitstream/v2/api`
  for (const [path, param] of [
    ['/analytics/agents/cost?agent=%FF', 'agent'],
    ['/analytics/agents/cost?agent=%', 'agent'],
    ['/analytics/agents/cost?model=gpt%E0%A4%A', 'model'],
    ['/tools/unpriced-events?toolId=a%zz', 'toolId'],
    ['/tools?toolType=%C0%AF', 'toolType'],
    ['/sources/metrics/ai/completions?from=%FF2026', 'from'],
  ]) {
    const res = await call(api + path, { key })
    t.equal(res.status, 400, `${path}: 400`)
    t.match(res.body.error, { type: 'invalid_request_error', code: 'invalid_parameter', param, message: /not valid percent-encoding/ }, `${path}: names ${param}`)
  }
  const escaped = await call(`${api}/analytics/agents/cost?agent=100%25%20sure`, { key })
  t.equal(escaped.status, 200, 'an escaped % is a value like any other')
  t.equal((await call(`${api}/tools?whatever=%FF`, { key })).status, 200, 'an unknown parameter, even malformed, is ignored')
})

t.test('a query parameter a route reads, given twice with different values, is a 400 naming it; unknown ones stay ignored', async (t) => {
  const m = await startMeterd(t, { config: { extensions: { ratelimit: { error_pattern: { enabled: false } } } } })
  const key = await m.key({ team: 'team-a' })
  const api = `${m.url}/profitstream/v2/api`
  const hook = await call(`${api}/export-configurations`, { key, body: { name: 'h', url: 'https://example.com/hook', signingEnabled: false } })
  t.equal(hook.status, 201)
  for (const [path, param] of [
    ['/sources/metrics/ai/completions?page=1&page=2', 'page'],
    ['/sources/metrics/tool/events?from=2026-01-01T00:00:00Z&from=2026-06-01T00:00:00Z', 'from'],
    ['/tools?size=5&size=500', 'size'],
    ['/tools?enabled=true&enabled=false', 'enabled'],
    ['/tools/unpriced-events?toolId=a&toolId=b', 'toolId'],
    ['/export-configurations?teamId=team-a&teamId=team-b', 'teamId'],
    [`/export-configurations/${hook.body.id}/deliveries?status=failed&status=pending`, 'status'],
    ['/sources/ai/anomaly?size=1&size=2', 'size'],
    ['/analytics/traces?size=1&size=2', 'size'],
  ]) {
    const res = await call(api + path, { key })
    t.equal(res.status, 400, `${path}: 400`)
    t.match(res.body.error, { type: 'invalid_request_error', code: 'invalid_parameter', param }, `${path}: names ${param}`)
  }
  const same = await call(`${api}/tools?teamId=team-a&teamId=team-a&size=5&size=5`, { key })
  t.equal(same.status, 200, 'the same value twice is no question')
  t.equal(same.body.page.size, 5)
  t.equal((await call(`${api}/tools?whatever=1&whatever=2`, { key })).status, 200, 'an unknown parameter, even repeated, is ignored')
  const metered = await call(`${m.url}${C}?teamId=team-a&teamId=other&tenantId=x&tenantId=y`, { key, body: completion() })
  t.equal(metered.status, 201, 'metering routes read no query parameter: repeats there are ignored too')
})
