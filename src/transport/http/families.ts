import type { RateLimitBucket } from '../admission/index.js'

/**
 * SPEC's "Families of paths that exist", with their buckets (Limits). Routes declare their own
 * bucket; a family only decides how a path under it that matches no route is admitted: with a
 * key, counted against the family's bucket, and only then answered 404. So a caller without a
 * valid key learns nothing about which paths exist, and a scan of unknown paths is counted like
 * any other failing request. This list follows SPEC and does not grow with routes.
 */
export function pathFamilies(apiPrefix: string): [prefix: string, bucket: RateLimitBucket][] {
  return [
    ['/meter/v2', 'metering'],
    ['/v2/otlp', 'metering'],
    ['/v2/sdk', 'platform'],
    [`/${apiPrefix}`, 'platform'],
  ]
}
