/** Helpers for the alert tests (no tests here): a meterd on a frozen clock with alerts and webhooks to 127.0.0.1. */
import type { AlertsExtension } from '../../src/extensions/alerts/index.js'
import { completion } from '../fixtures/wire-examples.js'
import { ADMIN_KEY, startMeterd, type Meterd, type Teardown } from './meterd.js'
import type { ExportConfigurations } from '../../src/extensions/exportconfigs/index.js'

export const T0 = Date.parse('2026-06-10T12:00:00.000Z')
export const alertsApi = (m: Meterd) => `${m.url}/profitstream/v2/api/sources/ai/anomaly`
export const exportApi = (m: Meterd) => `${m.url}/profitstream/v2/api/export-configurations`

export async function startAlertsMeterd(t: Teardown, opts: { dataDir?: string } = {}) {
  const m = await startMeterd(t, {
    frozenNow: T0,
    dataDir: opts.dataDir,
    config: {
      extensions: {
        apikeys: { bootstrap_key: ADMIN_KEY },
        exportconfigs: { allow_private_destinations: ['127.0.0.1'], poll_interval_ms: 3_600_000 },
        alerts: { evaluation_interval_seconds: 3600 },
      },
      // On a frozen clock the rate limiter's windows never reset; it is tested elsewhere.
      service: { extensions: ['apikeys', 'exportconfigs', 'tools', 'alerts'] },
    },
  })
  const alerts = m.service.getExtension<AlertsExtension>('alerts')!
  const engine = m.service.getExtension<ExportConfigurations>('exportconfigs')!.engine!
  return { m, alerts, engine }
}

/** A completion at `at` (ms) that costs `cost` USD (client cost). */
export function costing(cost: number, at: number, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const time = new Date(at).toISOString()
  return completion({ requestTime: time, completionStartTime: time, responseTime: time, totalCost: cost, ...extra })
}

/** The body the vendor's CLI sends to create an alert (wire-contract §5). */
export function cliRule(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    name: 'Daily spend',
    alertType: 'THRESHOLD',
    metricType: 'TOTAL_COST',
    operatorType: 'GREATER_THAN',
    threshold: 100,
    periodDuration: 'DAILY',
    notificationAddresses: ['ops@example.com'],
    slackConfigurations: [],
    webhookConfigurations: [],
    enabled: true,
    firing: false,
    ...extra,
  }
}
