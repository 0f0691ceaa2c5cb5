import type { Component, CreateSettings, ExtensionFactory, Host } from '../../host/component.js'
import type { Reply, RequestContext } from '../../transport/http/server.js'
import { loadAssets, type Asset } from './assets.js'
import { dashboardDescriptor, type Config } from './descriptor.js'

export const UI_BASE = '/ui'

/**
 * The response headers of every /ui file. The page runs only its own modules (no inline script,
 * no eval), styles only from its own stylesheets, talks only to this daemon, and cannot be framed.
 */
export const SECURITY_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'content-security-policy':
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; font-src 'self'; " +
    "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
  // Revalidated on every load (a 304 when unchanged), so an upgraded daemon never serves a stale page.
  'cache-control': 'no-cache',
})

/**
 * The dashboard at /ui: static files served from memory on the main listener, public (they hold
 * no data); the page asks for an API key and reads the analytics and alerts endpoints with it.
 * Listed in `service.extensions` to turn it on; left out, /ui is a 404.
 */
export class Dashboard implements Component {
  constructor(private readonly settings: CreateSettings, private readonly config: Config) {}

  async start(host: Host): Promise<void> {
    const assets = loadAssets({ base: UI_BASE, apiBase: `/${host.server.api_prefix}/v2/api`, refreshSeconds: this.config.refresh_seconds })
    for (const a of assets) host.http.route({ method: 'GET', path: a.path, bucket: null, scope: null, handler: (ctx) => serve(ctx, a) })
    this.settings.logger.debug({ path: UI_BASE, files: assets.length }, 'dashboard mounted')
  }

  async shutdown(): Promise<void> {}
}

function serve(ctx: RequestContext, a: Asset): Reply {
  const headers: Record<string, string> = { ...SECURITY_HEADERS, etag: a.etag, vary: 'accept-encoding' }
  if (ctx.header('if-none-match') === a.etag) return { status: 304, headers }
  const gzip = a.gzip && /\bgzip\b/.test(ctx.header('accept-encoding') ?? '')
  if (gzip) headers['content-encoding'] = 'gzip'
  return { status: 200, text: gzip ? a.gzip : a.body, contentType: a.contentType, headers }
}

export const dashboardFactory: ExtensionFactory<typeof dashboardDescriptor.schema> = {
  ...dashboardDescriptor,
  create: (settings, config) => new Dashboard(settings, config),
}
