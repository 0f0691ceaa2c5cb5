// The ratelimit extension as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import type { Descriptor, ExtensionFactory } from '../../host/component.js'
import { RateLimitSchema } from './config.js'

export const ratelimitDescriptor: Descriptor<ExtensionFactory<typeof RateLimitSchema>> = {
  kind: 'extension',
  type: 'ratelimit',
  description: 'Per-account rate limits in three buckets and error-pattern blocks (memory, or Redis for a cluster)',
  schema: RateLimitSchema,
  check(config, ctx) {
    if (config.backend !== 'redis') return
    let url: URL | undefined
    try {
      url = new URL(config.redis.url)
    } catch {}
    if (!url || !['redis:', 'rediss:'].includes(url.protocol)) ctx.issue('redis.url', `"${config.redis.url}" is not a redis:// or rediss:// URL`)
  },
}
