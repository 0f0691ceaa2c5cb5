import type { Host } from '../../host/component.js'
import { invalid, notFound } from '../../core/errors.js'
import { toResource } from '../../model/resource.js'
import { withoutOwnIdentity } from '../../domain/ingest/identity.js'
import { checkTeam, halPage, idParam, paging, timeRange } from '../../transport/http/query.js'
import type { Reply, RequestContext, Route } from '../../transport/http/server.js'
import type { UsageRecord } from '../../model/usage-record.js'
import type { ToolRegistry } from '../../domain/tools/registry.js'
import { readToolType, TOOL_TYPES, toToolResource, type Tool } from '../../domain/tools/tool.js'

/** The HAL list name of tools; `?format=array` answers a plain array instead (wire-contract §3.2). */
const LIST_NAME = 'toolResourceList'

/** A true/false query parameter (any case: Python's requests sends True); undefined when absent or empty. */
function flag(ctx: RequestContext, name: string): boolean | undefined {
  const v = ctx.query.get(name)?.toLowerCase()
  if (v === undefined || v === '') return undefined
  if (v !== 'true' && v !== 'false') throw invalid('invalid_parameter', `${name} must be true or false`, name)
  return v === 'true'
}

function listTools(reg: ToolRegistry, ctx: RequestContext): Reply {
  const team = checkTeam(ctx)
  const { page, size } = paging(ctx)
  const withDeleted = flag(ctx, 'includeDeleted')
  const type = ctx.query.get('toolType')
  // A filter value that matches nothing would answer an empty (or unfiltered) list as if it were true.
  const toolType = type ? readToolType(type) : undefined
  if (type && toolType === undefined) throw invalid('invalid_parameter', `toolType must be one of ${TOOL_TYPES.join(', ')}`, 'toolType')
  const enabled = flag(ctx, 'enabled')
  let tools: Tool[] = reg.list(team, { withDeleted: withDeleted === true })
  if (toolType) tools = tools.filter((t) => t.toolType === toolType)
  if (enabled !== undefined) tools = tools.filter((t) => t.enabled === enabled)
  const slice = tools.slice(page * size, page * size + size).map(toToolResource)
  if (ctx.query.get('format') === 'array') return { status: 200, body: slice }
  return { status: 200, body: halPage(LIST_NAME, slice, tools.length, page, size) }
}

/** Tool events stored unpriced (unknown toolId), newest first, for the caller's team. */
function listUnpriced(host: Host, ctx: RequestContext): Reply {
  const team = checkTeam(ctx)
  const { page, size } = paging(ctx)
  const { from, to } = timeRange(ctx)
  const toolId = idParam(ctx, 'toolId')
  const out: UsageRecord[] = []
  let total = 0
  for (const r of host.usage.unpriced(team, 'tool', from, to)) {
    if (r.kind !== 'tool' || (toolId !== undefined && r.body.toolId !== toolId)) continue
    if (total >= page * size && out.length < size) out.push(r)
    total++
  }
  return { status: 200, body: halPage('toolEventMetricResourceList', out.map(toResource), total, page, size) }
}

/**
 * `/{api_prefix}/v2/api/tools` (platform bucket): CRUD, by-tool-id, restore, and the list of
 * tool events stored unpriced. Reads need platform:read, writes platform:write; every call is
 * scoped to the key's team (another team's tool is a 404).
 */
export function mountToolRoutes(host: Host, reg: ToolRegistry): void {
  const base = `/${host.server.api_prefix}/v2/api/tools`
  const id = (ctx: RequestContext) => ctx.params.id
  const now = () => host.now()
  const one = (t: Tool | undefined, what: string): Reply => {
    if (!t) throw notFound(`no tool with ${what}`)
    return { status: 200, body: toToolResource(t) }
  }
  const route = (r: Omit<Route, 'bucket'>) => host.http.route({ ...r, bucket: 'platform' })
  // The caller's team is the key's: a body may repeat it (the CLI sends teamId), never name another (403).
  const toolBody = async (ctx: RequestContext) => withoutOwnIdentity(await ctx.json(), ctx.principal!)
  route({ method: 'GET', path: base, scope: 'platform:read', handler: (ctx) => listTools(reg, ctx) })
  route({
    method: 'POST',
    path: base,
    scope: 'platform:write',
    handler: async (ctx) => {
      const tool = await reg.create(checkTeam(ctx), await toolBody(ctx), now())
      // Location names the created tool (RFC 9110 §15.3.2), not the collection POSTed to.
      return { status: 201, body: toToolResource(tool), headers: { location: `${base}/${tool.id}` } }
    },
  })
  route({ method: 'GET', path: `${base}/unpriced-events`, scope: 'platform:read', handler: (ctx) => listUnpriced(host, ctx) })
  route({
    method: 'GET',
    path: `${base}/by-tool-id/:toolId`,
    scope: 'platform:read',
    handler: (ctx) => one(reg.byToolId(checkTeam(ctx), ctx.params.toolId), `toolId ${ctx.params.toolId}`),
  })
  route({ method: 'GET', path: `${base}/:id`, scope: 'platform:read', handler: (ctx) => one(reg.get(checkTeam(ctx), id(ctx)), `id ${id(ctx)}`) })
  route({
    method: 'PUT',
    path: `${base}/:id`,
    scope: 'platform:write',
    handler: async (ctx) => {
      const team = checkTeam(ctx)
      if (!reg.get(team, id(ctx))) throw notFound(`no tool with id ${id(ctx)}`)
      return { status: 200, body: toToolResource(await reg.update(team, id(ctx), await toolBody(ctx), now())) }
    },
  })
  route({
    method: 'DELETE',
    path: `${base}/:id`,
    scope: 'platform:write',
    handler: async (ctx) => ({ status: 200, body: toToolResource(await reg.remove(checkTeam(ctx), id(ctx), now())) }),
  })
  route({
    method: 'POST',
    path: `${base}/:id/restore`,
    scope: 'platform:write',
    handler: async (ctx) => ({ status: 200, body: toToolResource(await reg.restore(checkTeam(ctx), id(ctx), now())) }),
  })
}
