import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { gzipSync } from 'node:zlib'
import { PACKAGE_ROOT } from '../../core/paths.js'

/** One file the dashboard serves, read once at start and kept in memory with its gzip form. */
export interface Asset {
  readonly path: string
  readonly contentType: string
  readonly body: Buffer
  readonly gzip?: Buffer
  readonly etag: string
}

/** The dashboard's own files: plain HTML, JS modules and CSS under `ui/` at the package root, no build step. */
const UI_FILES: readonly [name: string, contentType: string][] = [
  ['app.js', 'text/javascript; charset=utf-8'],
  ['api.js', 'text/javascript; charset=utf-8'],
  ['charts.js', 'text/javascript; charset=utf-8'],
  ['format.js', 'text/javascript; charset=utf-8'],
  ['dashboard.css', 'text/css; charset=utf-8'],
  ['favicon.svg', 'image/svg+xml'],
]

/** uPlot, from the npm package the daemon depends on: served by the daemon, never from a CDN. */
const UPLOT_FILES: readonly [name: string, contentType: string][] = [
  ['uPlot.esm.js', 'text/javascript; charset=utf-8'],
  ['uPlot.min.css', 'text/css; charset=utf-8'],
]

export const UI_DIR = join(PACKAGE_ROOT, 'ui')

/** Where the `uplot` package's dist files are (its `main` is dist/uPlot.cjs.js). */
export function uplotDir(): string {
  return dirname(createRequire(import.meta.url).resolve('uplot'))
}

export interface PageSettings {
  /** The analytics and platform API's base path, `/{api_prefix}/v2/api`. */
  apiBase: string
  refreshSeconds: number
  /** Where the dashboard is mounted, e.g. `/ui`. */
  base: string
}

/**
 * Every file under `base`: index.html (at `base` itself, with the page settings filled in as
 * `<meta>` tags: the CSP allows no inline script), the modules, the stylesheet, the favicon and
 * uPlot under `base/vendor/`.
 */
export function loadAssets(s: PageSettings): Asset[] {
  const html = readFileSync(join(UI_DIR, 'index.html'), 'utf8')
    .replaceAll('{{BASE}}', s.base)
    .replaceAll('{{API_BASE}}', s.apiBase)
    .replaceAll('{{REFRESH_SECONDS}}', String(s.refreshSeconds))
  const assets = [asset(s.base, 'text/html; charset=utf-8', Buffer.from(html))]
  for (const [name, type] of UI_FILES) assets.push(asset(`${s.base}/${name}`, type, readFileSync(join(UI_DIR, name))))
  const vendor = uplotDir()
  for (const [name, type] of UPLOT_FILES) assets.push(asset(`${s.base}/vendor/${name}`, type, readFileSync(join(vendor, name))))
  return assets
}

function asset(path: string, contentType: string, body: Buffer): Asset {
  const etag = `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`
  // Compressed once here, so a page load costs no CPU beyond the copy; small files are not worth it.
  const gz = body.length >= 1024 ? gzipSync(body, { level: 9 }) : undefined
  return { path, contentType, body, etag, gzip: gz && gz.length < body.length ? gz : undefined }
}
