import type { Factory } from './host/component.js'
import { forwardFactory } from './connectors/forward/index.js'
import { genaiFactory } from './connectors/genai/index.js'
import { routingFactory } from './connectors/routing/index.js'
import { analyticsFactory } from './exporters/analytics/index.js'
import { clickhouseFactory } from './exporters/clickhouse/index.js'
import { debugFactory } from './exporters/debug/index.js'
import { lmdbFactory } from './exporters/lmdb/index.js'
import { upstreamFactory } from './exporters/upstream/index.js'
import { webhookFactory } from './exporters/webhook/index.js'
import { alertsFactory } from './extensions/alerts/index.js'
import { dashboardFactory } from './extensions/dashboard/index.js'
import { apikeysFactory } from './extensions/apikeys/index.js'
import { exportconfigsFactory } from './extensions/exportconfigs/index.js'
import { ratelimitFactory } from './extensions/ratelimit/index.js'
import { toolsFactory } from './extensions/tools/index.js'
import { attributesFactory } from './processors/attributes/index.js'
import { attributionFactory } from './processors/attribution/index.js'
import { filterFactory } from './processors/filter/index.js'
import { pricingFactory } from './processors/pricing/index.js'
import { validateFactory } from './processors/validate/index.js'
import { meteringFactory } from './receivers/metering/index.js'
import { otlpFactory } from './receivers/otlp/index.js'

/** The distribution: every component this build of meterd knows, by kind and type. */
export const FACTORIES: readonly Factory[] = [
  meteringFactory,
  otlpFactory,
  validateFactory,
  attributionFactory,
  pricingFactory,
  filterFactory,
  attributesFactory,
  lmdbFactory,
  debugFactory,
  forwardFactory,
  genaiFactory,
  routingFactory,
  apikeysFactory,
  webhookFactory,
  upstreamFactory,
  analyticsFactory,
  clickhouseFactory,
  exportconfigsFactory,
  ratelimitFactory,
  toolsFactory,
  alertsFactory,
  dashboardFactory,
]
