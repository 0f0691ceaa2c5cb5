/** Shared set-up of the pricing tests (not a test itself). */
import { Decimal } from '../../src/domain/pricing/money.js'
import { call, startMeterd, type Meterd, type StartOptions, type Teardown } from './meterd.js'

export const API = '/profitstream/v2/api'
export const EVENTS = `${API}/sources/metrics/tool/events`
export const COMPLETIONS = `${API}/sources/metrics/ai/completions`

/**
 * A daemon with the pricing pipeline and the tool registry, without rate limiting and webhooks
 * (other suites own those; 1,000 concurrent events would otherwise be throttled).
 */
export function startPricing(t: Teardown, opts: StartOptions & { processors?: Record<string, unknown>; extensions?: Record<string, unknown> } = {}): Promise<Meterd> {
  return startMeterd(t, {
    ...opts,
    config: {
      ...(opts.extensions ? { extensions: { apikeys: { bootstrap_key: 'hak_default_adminadminadminadminadmin01' }, ...opts.extensions } } : {}),
      ...(opts.processors ? { processors: opts.processors } : {}),
      service: {
        extensions: ['apikeys', 'tools'],
        pipelines: { usage: { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'], exporters: ['lmdb'] } },
      },
      ...(opts.config ?? {}),
    },
  })
}

/** The worked table's tiers (issue 3). */
export const TIERS = [
  { upTo: 1000, unitPrice: 0.01 },
  { upTo: 10000, unitPrice: '0.008' },
  { upTo: null, unitPrice: 0.005 },
]

export function toolBody(toolId: string, element: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  return { toolId, name: toolId, toolType: 'REST_API', pricing: { currency: 'USD', elements: [element] }, ...extra }
}

export async function createTool(m: Meterd, key: string, body: unknown): Promise<any> {
  const res = await call(`${m.url}${API}/tools`, { key, body })
  if (res.status !== 201) throw new Error(`create tool: ${res.status} ${res.text}`)
  return res.body
}

let seq = 0
export function event(toolId: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    toolId,
    transactionId: `ev-${process.pid}-${seq++}`,
    durationMs: 3,
    success: true,
    timestamp: '2026-11-21T10:00:00.000Z',
    organizationName: 'AcmeOrg',
    productName: 'Gold',
    ...extra,
  }
}

/** Posts a tool event and returns the stored record (read back through the API). */
export async function postEvent(m: Meterd, key: string, body: Record<string, unknown>): Promise<any> {
  const res = await call(`${m.url}/meter/v2/tool/events`, { key, body })
  if (res.status !== 201) throw new Error(`tool event: ${res.status} ${res.text}`)
  return readBack(m, key, 'tool', body.transactionId as string)
}

export async function readBack(m: Meterd, key: string, kind: 'tool' | 'completion', transactionId: string): Promise<any> {
  const path = kind === 'tool' ? EVENTS : COMPLETIONS
  const res = await call(`${m.url}${path}?transactionId=${encodeURIComponent(transactionId)}`, { key })
  const list = res.body?._embedded?.[kind === 'tool' ? 'toolEventMetricResourceList' : 'aICompletionMetricResourceList']
  if (!list || list.length !== 1) throw new Error(`read back ${transactionId}: ${res.status} ${res.text}`)
  return list[0]
}

export const sum = (xs: string[]): string => xs.reduce((a, x) => a.plus(x), new Decimal(0)).toFixed()
