/** The rate-limit buckets of SPEC's Limits. */
export type RateLimitBucket = 'metering' | 'analytics' | 'platform'

/** Analytics reads under /{api_prefix}/v2/api/ (DESIGN §3); everything else there is platform. */
const ANALYTICS_SEGMENTS = new Set(['analytics', 'sources', 'traces', 'charts', 'cost-attribution', 'billing-analytics'])

/**
 * Which bucket a path is counted in, or null for the operations routes (health,
 * metrics, dashboard), which need no key and carry no rate-limit headers.
 * Decided by the path family alone, so unknown paths under a family are still
 * authenticated and counted.
 */
export function bucketFor(path: string, apiPrefix: string): RateLimitBucket | null {
  if (path.startsWith('/meter/v2/') || path.startsWith('/v2/otlp/') || path === '/v2/otlp') return 'metering'
  if (path === '/v2/tool/events' || path === '/tool/events') return 'metering'
  if (path.startsWith('/v2/sdk/') || path === '/v2/sdk') return 'platform'
  const api = `/${apiPrefix}/v2/api/`
  if (path.startsWith(api)) {
    const rest = path.slice(api.length)
    const seg = rest.slice(0, rest.indexOf('/') === -1 ? undefined : rest.indexOf('/'))
    if (seg === 'sources') return rest.startsWith('sources/metrics') ? 'analytics' : 'platform'
    return ANALYTICS_SEGMENTS.has(seg) ? 'analytics' : 'platform'
  }
  if (path === `/${apiPrefix}/v2/api` || path.startsWith(`/${apiPrefix}/`)) return 'platform'
  return null
}
