import type { Host } from '../../core/component.js'
import { ApiError, invalid } from '../../core/errors.js'
import type { RequestContext } from '../../http/server.js'
import { isDateTime } from '../../model/schemas.js'
import type { UsageKind, UsageRecord } from '../../model/usage-record.js'

/** The HAL list name clients read (wire-contract §2.3: `_embedded.aICompletionMetricResourceList`). */
const LIST_NAME: Record<UsageKind, string> = { completion: 'aICompletionMetricResourceList', tool: 'toolEventMetricResourceList' }
const MAX_PAGE_SIZE = 1000

/** A stored record as the read API shows it: the client's fields as sent, then what meterd added. */
export function toResource(r: UsageRecord): Record<string, unknown> {
  const out: Record<string, unknown> = { ...r.body }
  out.id = r.id
  out.created = r.receivedAt
  out.eventTime = r.eventTime
  out.team = { id: r.caller.team }
  out.environment = r.body.environment ?? r.attribution.environment
  out.attributed = r.attributed
  if (r.cost) {
    out.cost = r.cost
    if (out.totalCost === undefined || out.totalCost === null) out.totalCost = Number(r.cost.total)
    // The price book's parts (inputTokenCost, …) as JSON numbers too; `cost` keeps the exact strings.
    for (const [part, v] of Object.entries(r.cost.parts)) {
      if (part.endsWith('TokenCost') && (out[part] === undefined || out[part] === null)) out[part] = Number(v)
    }
  }
  return out
}

/** `teamId` in a query must be the key's own team (DESIGN §4). */
export function checkTeam(ctx: RequestContext): string {
  const team = ctx.principal!.team
  const asked = ctx.query.get('teamId')
  if (asked !== null && asked !== '' && asked !== team)
    throw new ApiError(403, 'permission_error', 'team_mismatch', 'teamId does not match the team of the API key', { param: 'teamId' })
  return team
}

export function paging(ctx: RequestContext): { page: number; size: number } {
  const int = (name: string, def: number, min: number, max: number): number => {
    const v = ctx.query.get(name)
    if (v === null || v === '') return def
    const n = Number(v)
    if (!Number.isInteger(n) || n < min || n > max) throw invalid('invalid_parameter', `${name} must be an integer from ${min} to ${max}`, name)
    return n
  }
  return { page: int('page', 0, 0, 1_000_000), size: int('size', 20, 1, MAX_PAGE_SIZE) }
}

function timeParam(ctx: RequestContext, name: string): string | undefined {
  const v = ctx.query.get(name)
  if (v === null || v === '') return undefined
  if (!isDateTime(v)) throw invalid('invalid_parameter', `${name} must be an ISO-8601 date-time`, name)
  return new Date(v).toISOString()
}

function list(host: Host, ctx: RequestContext, kind: UsageKind) {
  const team = checkTeam(ctx)
  const { page, size } = paging(ctx)
  const opt = (name: string) => ctx.query.get(name) || undefined
  const { records, total } = host.store.usage.list({
    account: ctx.principal!.account,
    team,
    kind,
    transactionId: opt('transactionId'),
    traceId: opt('traceId'),
    toolId: kind === 'tool' ? opt('toolId') : undefined,
    from: timeParam(ctx, 'from'),
    to: timeParam(ctx, 'to'),
    page,
    size,
  })
  return {
    status: 200,
    body: {
      _embedded: { [LIST_NAME[kind]]: records.map(toResource) },
      page: { size, totalElements: total, totalPages: Math.ceil(total / size), number: page },
    },
  }
}

export function mountReadRoutes(host: Host): void {
  const base = `/${host.server.api_prefix}/v2/api/sources/metrics`
  host.http.route({ method: 'GET', path: `${base}/ai/completions`, scope: 'analytics:read', handler: (ctx) => list(host, ctx, 'completion') })
  host.http.route({ method: 'GET', path: `${base}/tool/events`, scope: 'analytics:read', handler: (ctx) => list(host, ctx, 'tool') })
}
