import { lazyFactory, type Factory } from './host/component.js'
import { forwardDescriptor } from './connectors/forward/descriptor.js'
import { genaiDescriptor } from './connectors/genai/descriptor.js'
import { routingDescriptor } from './connectors/routing/descriptor.js'
import { analyticsDescriptor } from './exporters/analytics/descriptor.js'
import { clickhouseDescriptor } from './exporters/clickhouse/descriptor.js'
import { debugDescriptor } from './exporters/debug/descriptor.js'
import { lmdbDescriptor } from './exporters/lmdb/descriptor.js'
import { upstreamDescriptor } from './exporters/upstream/descriptor.js'
import { webhookDescriptor } from './exporters/webhook/descriptor.js'
import { alertsDescriptor } from './extensions/alerts/descriptor.js'
import { dashboardDescriptor } from './extensions/dashboard/descriptor.js'
import { apikeysDescriptor } from './extensions/apikeys/descriptor.js'
import { exportconfigsDescriptor } from './extensions/exportconfigs/descriptor.js'
import { ratelimitDescriptor } from './extensions/ratelimit/descriptor.js'
import { toolsDescriptor } from './extensions/tools/descriptor.js'
import { attributesDescriptor } from './processors/attributes/descriptor.js'
import { attributionDescriptor } from './processors/attribution/descriptor.js'
import { filterDescriptor } from './processors/filter/descriptor.js'
import { pricingDescriptor } from './processors/pricing/descriptor.js'
import { validateDescriptor } from './processors/validate/descriptor.js'
import { meteringDescriptor } from './receivers/metering/descriptor.js'
import { otlpDescriptor } from './receivers/otlp/descriptor.js'

/**
 * The distribution: every component this build of meterd knows, by kind and type. Each is its
 * descriptor (schema, checks: what `meterd validate`, `print-config` and `docs` read) and the
 * implementation that `create` loads, so a config command loads no component's runtime and a
 * daemon only those its service uses.
 */
export const FACTORIES: readonly Factory[] = [
  lazyFactory(meteringDescriptor, async () => (await import('./receivers/metering/index.js')).meteringFactory),
  lazyFactory(otlpDescriptor, async () => (await import('./receivers/otlp/index.js')).otlpFactory),
  lazyFactory(validateDescriptor, async () => (await import('./processors/validate/index.js')).validateFactory),
  lazyFactory(attributionDescriptor, async () => (await import('./processors/attribution/index.js')).attributionFactory),
  lazyFactory(pricingDescriptor, async () => (await import('./processors/pricing/index.js')).pricingFactory),
  lazyFactory(filterDescriptor, async () => (await import('./processors/filter/index.js')).filterFactory),
  lazyFactory(attributesDescriptor, async () => (await import('./processors/attributes/index.js')).attributesFactory),
  lazyFactory(lmdbDescriptor, async () => (await import('./exporters/lmdb/index.js')).lmdbFactory),
  lazyFactory(debugDescriptor, async () => (await import('./exporters/debug/index.js')).debugFactory),
  lazyFactory(forwardDescriptor, async () => (await import('./connectors/forward/index.js')).forwardFactory),
  lazyFactory(genaiDescriptor, async () => (await import('./connectors/genai/index.js')).genaiFactory),
  lazyFactory(routingDescriptor, async () => (await import('./connectors/routing/index.js')).routingFactory),
  lazyFactory(apikeysDescriptor, async () => (await import('./extensions/apikeys/index.js')).apikeysFactory),
  lazyFactory(webhookDescriptor, async () => (await import('./exporters/webhook/index.js')).webhookFactory),
  lazyFactory(upstreamDescriptor, async () => (await import('./exporters/upstream/index.js')).upstreamFactory),
  lazyFactory(analyticsDescriptor, async () => (await import('./exporters/analytics/index.js')).analyticsFactory),
  lazyFactory(clickhouseDescriptor, async () => (await import('./exporters/clickhouse/index.js')).clickhouseFactory),
  lazyFactory(exportconfigsDescriptor, async () => (await import('./extensions/exportconfigs/index.js')).exportconfigsFactory),
  lazyFactory(ratelimitDescriptor, async () => (await import('./extensions/ratelimit/index.js')).ratelimitFactory),
  lazyFactory(toolsDescriptor, async () => (await import('./extensions/tools/index.js')).toolsFactory),
  lazyFactory(alertsDescriptor, async () => (await import('./extensions/alerts/index.js')).alertsFactory),
  lazyFactory(dashboardDescriptor, async () => (await import('./extensions/dashboard/index.js')).dashboardFactory),
]
