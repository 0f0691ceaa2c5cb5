/**
 * The /ui routes over plain HTTP: what the daemon serves, with which headers, from where (the
 * page's own files under ui/, uPlot from its npm package), compressed and revalidated, public
 * while the data is not, and absent when the dashboard extension is left out.
 */
import { request } from 'node:http'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { gunzipSync } from 'node:zlib'
import t from 'tap'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { call, spawnMeterd, startMeterd, tempDir } from '../helpers/meterd.js'

const UPLOT = dirname(createRequire(import.meta.url).resolve('uplot'))

/** A raw GET, so the test sees the bytes on the wire (fetch would decompress them). */
function raw(url: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    request(url, { headers }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }))
    })
      .on('error', reject)
      .end()
  })
}

function checkSecurityHeaders(t: Pick<typeof import('tap').t, 'same' | 'notMatch' | 'equal'>, h: Record<string, string | string[] | undefined>, what: string): void {
  const csp = String(h['content-security-policy'] ?? '')
  const directives = new Map(csp.split(';').map((d) => d.trim().split(/\s+/)).map(([k, ...v]) => [k, v.join(' ')]))
  t.same(
    ['default-src', 'script-src', 'style-src', 'connect-src', 'frame-ancestors', 'object-src'].map((d) => directives.get(d)),
    ["'self'", "'self'", "'self'", "'self'", "'none'", "'none'"],
    `${what}: a strict Content-Security-Policy`,
  )
  t.notMatch(csp, /unsafe-|\*|https?:|data:/, `${what}: no unsafe-inline, unsafe-eval, wildcard or other origin`)
  t.equal(h['x-content-type-options'], 'nosniff', `${what}: nosniff`)
  t.equal(h['referrer-policy'], 'no-referrer', `${what}: no referrer`)
}

t.test('/ui serves the page, its modules and uPlot, with strict headers and no key', async (t) => {
  const m = await startMeterd(t, { config: { server: { api_prefix: 'acme' }, extensions: { dashboard: { refresh_seconds: 7 } } } })
  const page = await raw(`${m.url}/ui`)
  t.equal(page.status, 200, 'GET /ui needs no key')
  t.equal(page.headers['content-type'], 'text/html; charset=utf-8', 'as HTML')
  checkSecurityHeaders(t, page.headers, '/ui')
  const html = page.body.toString()
  t.match(html, '<meta name="meterd-api" content="/acme/v2/api">', 'the page reads the API under the configured api_prefix')
  t.match(html, '<meta name="meterd-refresh-seconds" content="7">', 'and refreshes as configured')
  t.same([...html.matchAll(/<script\b[^>]*>([\s\S]*?)<\/script>/g)].map((s) => s[1].trim()), [''], 'one script, external: no inline script')
  t.notMatch(html, /\sstyle=|\son[a-z]+=|<style/i, 'no inline style or event handler attribute')
  t.equal(await raw(`${m.url}/ui/`).then((r) => r.status), 200, '/ui/ is the same page')

  // Every file the page names is served with its type and the same headers.
  const refs = [...html.matchAll(/(?:href|src)="(\/ui\/[^"]+)"/g)].map((r) => r[1])
  const modules = ['/ui/app.js', '/ui/api.js', '/ui/charts.js', '/ui/format.js']
  for (const path of new Set([...refs, ...modules])) {
    const res = await raw(m.url + path)
    t.equal(res.status, 200, `${path} is served`)
    const type = path.endsWith('.js') ? 'text/javascript; charset=utf-8' : path.endsWith('.css') ? 'text/css; charset=utf-8' : 'image/svg+xml'
    t.equal(res.headers['content-type'], type, `${path} as ${type}`)
    checkSecurityHeaders(t, res.headers, path)
  }
  t.ok(refs.includes('/ui/favicon.svg'), 'the page has its own favicon')
  for (const module of modules) {
    const src = readFileSync(join(PACKAGE_ROOT, 'ui', module.slice(4)), 'utf8')
    const imports = [...src.matchAll(/^import .* from '([^']+)'/gm)].map((i) => i[1])
    t.ok(imports.every((i) => i.startsWith('./')), `${module} imports only the daemon's own files (${imports.join(', ') || 'none'})`)
  }

  // uPlot is the npm package's own build, byte for byte.
  const esm = await raw(`${m.url}/ui/vendor/uPlot.esm.js`)
  t.ok(esm.body.equals(readFileSync(join(UPLOT, 'uPlot.esm.js'))), 'uPlot.esm.js is node_modules/uplot/dist/uPlot.esm.js')
  const css = await raw(`${m.url}/ui/vendor/uPlot.min.css`)
  t.ok(css.body.equals(readFileSync(join(UPLOT, 'uPlot.min.css'))), 'and its stylesheet')

  // Compressed for a browser that asks, revalidated with its ETag.
  const gz = await raw(`${m.url}/ui/vendor/uPlot.esm.js`, { 'accept-encoding': 'gzip, deflate, br' })
  t.equal(gz.headers['content-encoding'], 'gzip', 'gzip when accepted')
  t.ok(gz.body.length < esm.body.length / 2, `${esm.body.length} bytes sent as ${gz.body.length}`)
  t.ok(gunzipSync(gz.body).equals(esm.body), 'the same bytes once decompressed')
  t.equal(esm.headers['content-encoding'], undefined, 'plain when not accepted')
  const etag = String(esm.headers.etag)
  const again = await raw(`${m.url}/ui/vendor/uPlot.esm.js`, { 'if-none-match': etag })
  t.same([again.status, again.body.length], [304, 0], 'a 304 without a body for a cached copy')
  checkSecurityHeaders(t, again.headers, 'a 304')

  const head = await fetch(`${m.url}/ui/app.js`, { method: 'HEAD' })
  t.equal(head.status, 200, 'HEAD works too')
  t.equal((await raw(`${m.url}/ui/nothing.js`)).status, 404, 'a file that is not there is a 404')

  // The page is public; the data it draws is not.
  t.equal((await call(`${m.url}/acme/v2/api/analytics/summary`)).status, 401, 'the analytics answers still need a key')
})

t.test('left out of service.extensions, there is no /ui', async (t) => {
  const m = await startMeterd(t, { config: { service: { extensions: ['apikeys', 'ratelimit', 'exportconfigs', 'tools', 'alerts'] } } })
  t.equal((await raw(`${m.url}/ui`)).status, 404, '/ui is a 404')
  t.equal((await raw(`${m.url}/ui/vendor/uPlot.esm.js`)).status, 404, 'and so is uPlot')
})

t.test('the built daemon (dist/) serves /ui and uPlot from the package', async (t) => {
  const d = await spawnMeterd(t, { dataDir: join(tempDir(), 'data') })
  const page = await raw(`${d.url}/ui`)
  t.equal(page.status, 200, 'GET /ui from bin/meterd.js run')
  t.match(page.body.toString(), '<meta name="meterd-api" content="/profitstream/v2/api">', 'with the default api_prefix')
  const esm = await raw(`${d.url}/ui/vendor/uPlot.esm.js`)
  t.ok(esm.status === 200 && esm.body.equals(readFileSync(join(UPLOT, 'uPlot.esm.js'))), 'and uPlot')
  t.equal((await raw(`${d.url}/ui/charts.js`)).status, 200, 'and the modules')
})
