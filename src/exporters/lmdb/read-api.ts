import type { Host } from '../../host/component.js'
import { toResource } from '../../model/resource.js'
import { MEDIA_KINDS, MEDIA_PATH, type UsageKind } from '../../model/usage-record.js'
import { checkTeam, halPage, idParam, paging, timeRange } from '../../transport/http/query.js'
import type { RequestContext } from '../../transport/http/server.js'

/** The HAL list name clients read (wire-contract §2.3: `_embedded.aICompletionMetricResourceList`). */
const LIST_NAME: Record<UsageKind, string> = {
  completion: 'aICompletionMetricResourceList',
  tool: 'toolEventMetricResourceList',
  image: 'aIImageMetricResourceList',
  audio: 'aIAudioMetricResourceList',
  video: 'aIVideoMetricResourceList',
}

function list(host: Host, ctx: RequestContext, kind: UsageKind) {
  const team = checkTeam(ctx)
  const { page, size } = paging(ctx)
  const { records, total } = host.usage.list({
    team,
    kind,
    transactionId: idParam(ctx, 'transactionId'),
    traceId: idParam(ctx, 'traceId'),
    toolId: kind === 'tool' ? idParam(ctx, 'toolId') : undefined,
    ...timeRange(ctx),
    page,
    size,
  })
  return {
    status: 200,
    body: halPage(LIST_NAME[kind], records.map(toResource), total, page, size),
  }
}

export function mountReadRoutes(host: Host): void {
  const base = `/${host.server.api_prefix}/v2/api/sources/metrics`
  host.http.route({ method: 'GET', path: `${base}/ai/completions`, bucket: 'analytics', scope: 'analytics:read', handler: (ctx) => list(host, ctx, 'completion') })
  host.http.route({ method: 'GET', path: `${base}/tool/events`, bucket: 'analytics', scope: 'analytics:read', handler: (ctx) => list(host, ctx, 'tool') })
  for (const kind of MEDIA_KINDS)
    host.http.route({ method: 'GET', path: `${base}/ai/${MEDIA_PATH[kind]}`, bucket: 'analytics', scope: 'analytics:read', handler: (ctx) => list(host, ctx, kind) })
}
