import { checkTeam, paging } from '../../transport/http/query.js'
import type { Host } from '../../host/component.js'
import { conflict, invalid, notFound } from '../../core/errors.js'
import { newId } from '../../core/ids.js'
import type { RequestContext, Reply } from '../../transport/http/server.js'
import { isDateTime, toIsoUtc } from '../../model/schemas.js'
import { withoutOwnIdentity } from '../../domain/ingest/identity.js'
import { KeyedSerial } from '../../core/serial.js'
import { DestinationRefused } from '../../domain/webhooks/destination.js'
import type { DeliveryEngine } from '../../domain/webhooks/engine.js'
import { EVENT_TYPES, FILTER_FIELDS, USAGE_EVENT_TYPES, type Delivery, type ExportConfiguration, type Filters, type SubscribableEventType } from '../../domain/webhooks/model.js'
import type { ExportConfigStore } from './store.js'

export interface ApiDeps {
  host: Host
  store: ExportConfigStore
  engine: DeliveryEngine
  defaultTimeoutMs: number
  maxConfigurationsPerTeam: number
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)

/** A configuration as every response shows it: the signing state, never a secret. */
function view(d: ApiDeps, c: ExportConfiguration) {
  return {
    id: c.id,
    teamId: c.team,
    name: c.name,
    url: c.url,
    enabled: c.enabled,
    ...(c.disabledReason ? { disabledReason: c.disabledReason } : {}),
    eventTypes: c.eventTypes,
    filters: c.filters,
    batching: c.batching,
    timeoutMs: c.timeoutMs ?? d.defaultTimeoutMs,
    signing: d.store.signingView(c.id, d.host.now()),
    createdAt: c.createdAt,
    updatedAt: c.updatedAt,
  }
}

function deliveryView(x: Delivery, withEvent: boolean) {
  return {
    id: x.id,
    eventId: x.eventId,
    eventType: x.eventType,
    exportConfigurationId: x.configId,
    status: x.status,
    attemptCount: x.attemptCount,
    ...(x.nextAttemptAt !== undefined ? { nextAttemptAt: new Date(x.nextAttemptAt).toISOString() } : {}),
    ...(x.lastError ? { lastError: x.lastError } : {}),
    attempts: x.attempts,
    createdAt: new Date(x.createdAt).toISOString(),
    updatedAt: new Date(x.updatedAt).toISOString(),
    ...(withEvent ? { event: JSON.parse(x.body) } : {}),
  }
}

type Fields = Pick<ExportConfiguration, 'name' | 'url' | 'enabled' | 'eventTypes' | 'filters' | 'batching' | 'timeoutMs'> & { signingEnabled?: boolean }

/** Checks a create/replace (`full`) or patch body; every 400 names its field. */
function parseFields(d: ApiDeps, body: unknown, full: boolean): Partial<Fields> {
  if (!isObject(body)) throw invalid('invalid_body', 'the body must be a JSON object')
  const out: Partial<Fields> = {}
  const has = (k: string) => body[k] !== undefined
  if (full || has('name')) {
    const v = body.name
    if (typeof v !== 'string' || v.trim().length === 0 || v.length > 200) throw invalid('invalid_field', 'name is required: a string of 1 to 200 characters', 'name')
    out.name = v.trim()
  }
  if (full || has('url')) out.url = parseUrl(d, body.url)
  if (has('enabled')) {
    if (typeof body.enabled !== 'boolean') throw invalid('invalid_field', 'enabled must be a boolean', 'enabled')
    out.enabled = body.enabled
  }
  if (has('eventTypes')) {
    const v = body.eventTypes
    if (!Array.isArray(v) || v.length === 0) throw invalid('invalid_field', `eventTypes must be a non-empty list of: ${EVENT_TYPES.join(', ')}`, 'eventTypes')
    v.forEach((t, i) => {
      if (!EVENT_TYPES.includes(t as SubscribableEventType))
        throw invalid('unknown_event_type', `unknown event type ${JSON.stringify(t)}; known types: ${EVENT_TYPES.join(', ')}`, `eventTypes[${i}]`)
    })
    out.eventTypes = [...new Set(v as SubscribableEventType[])]
  }
  if (has('filters')) out.filters = parseFilters(body.filters)
  if (has('batching') || body.batching === null) out.batching = parseBatching(body.batching)
  if (has('timeoutMs') || body.timeoutMs === null) {
    const v = body.timeoutMs
    if (v !== null && (typeof v !== 'number' || !Number.isInteger(v) || v < 100 || v > 60_000))
      throw invalid('invalid_field', 'timeoutMs must be an integer from 100 to 60000 (milliseconds)', 'timeoutMs')
    out.timeoutMs = v as number | null
  }
  if (has('signingEnabled')) {
    if (typeof body.signingEnabled !== 'boolean') throw invalid('invalid_field', 'signingEnabled must be a boolean', 'signingEnabled')
    out.signingEnabled = body.signingEnabled
  }
  return out
}

function parseUrl(d: ApiDeps, v: unknown): string {
  if (typeof v !== 'string' || v.length === 0) throw invalid('invalid_url', 'url is required: an absolute http(s) URL', 'url')
  if (v.length > 2048) throw invalid('invalid_url', 'url is longer than 2048 characters', 'url')
  let u: URL
  try {
    u = new URL(v)
  } catch {
    throw invalid('invalid_url', `url ${JSON.stringify(v)} is not an absolute URL`, 'url')
  }
  if (u.protocol !== 'https:' && u.protocol !== 'http:') throw invalid('invalid_url', `url must use https or http, not ${u.protocol.slice(0, -1)}`, 'url')
  if (u.username || u.password) throw invalid('invalid_url', 'url must not carry credentials; sign deliveries instead', 'url')
  if (u.hash) throw invalid('invalid_url', 'url must not have a #fragment', 'url')
  if (u.port === '0') throw invalid('invalid_url', 'url must not use port 0', 'url')
  try {
    d.engine.guard.checkLiteral(u)
  } catch (err) {
    throw refused(err)
  }
  return u.toString()
}

function refused(err: unknown): unknown {
  if (err instanceof DestinationRefused) return invalid('destination_refused', `url is refused: ${err.message} (allow it with allow_private_destinations)`, 'url')
  return err
}

/** Resolves the url's name now, as delivery will: a name that leads only to internal addresses is refused at once. */
async function checkDestination(d: ApiDeps, url: string | undefined): Promise<void> {
  if (url === undefined) return
  try {
    await d.engine.guard.check(new URL(url))
  } catch (err) {
    throw refused(err)
  }
}

const MAX_FILTER_VALUES = 100
const MAX_FILTER_VALUE_LENGTH = 255

function parseFilters(v: unknown): Filters {
  if (v === null) return {}
  if (!isObject(v)) throw invalid('invalid_field', 'filters must be an object', 'filters')
  const out: Filters = {}
  for (const [k, raw] of Object.entries(v)) {
    if (!(FILTER_FIELDS as readonly string[]).includes(k))
      throw invalid('unknown_filter', `unknown filter ${JSON.stringify(k)}; known filters: ${FILTER_FIELDS.join(', ')}`, `filters.${k}`)
    const list = typeof raw === 'string' ? [raw] : raw
    // Bounded: every record's delivery is matched against these lists.
    if (!Array.isArray(list) || list.length === 0 || list.length > MAX_FILTER_VALUES || list.some((x) => typeof x !== 'string' || x.length === 0 || x.length > MAX_FILTER_VALUE_LENGTH))
      throw invalid(
        'invalid_field',
        `filters.${k} must be a non-empty string or list of at most ${MAX_FILTER_VALUES} strings of 1 to ${MAX_FILTER_VALUE_LENGTH} characters`,
        `filters.${k}`,
      )
    out[k as keyof Filters] = [...new Set(list as string[])]
  }
  return out
}

function parseBatching(v: unknown): ExportConfiguration['batching'] {
  if (v === null || v === false) return null
  if (!isObject(v)) throw invalid('invalid_field', 'batching must be an object {maxEvents, maxWaitMs} or null', 'batching')
  const maxEvents = v.maxEvents ?? 100
  const maxWaitMs = v.maxWaitMs ?? 5000
  if (typeof maxEvents !== 'number' || !Number.isInteger(maxEvents) || maxEvents < 1 || maxEvents > 1000)
    throw invalid('invalid_field', 'batching.maxEvents must be an integer from 1 to 1000', 'batching.maxEvents')
  if (typeof maxWaitMs !== 'number' || !Number.isInteger(maxWaitMs) || maxWaitMs < 0 || maxWaitMs > 3_600_000)
    throw invalid('invalid_field', 'batching.maxWaitMs must be an integer from 0 to 3600000', 'batching.maxWaitMs')
  return { maxEvents, maxWaitMs }
}

async function optionalJson(ctx: RequestContext): Promise<unknown> {
  const raw = await ctx.raw()
  if (raw.length === 0) return {}
  return ctx.json()
}

/** The body, which may repeat the key's own team (as the CLI's do) but never name another (403, as for tools and alert rules). */
async function configBody(ctx: RequestContext): Promise<unknown> {
  return withoutOwnIdentity(await ctx.json(), ctx.principal!)
}

export function mountExportConfigurationRoutes(d: ApiDeps): void {
  const { host, store, engine } = d
  const base = `/${host.server.api_prefix}/v2/api/export-configurations`
  const route = (method: 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE', path: string, scope: 'platform:read' | 'platform:write', handler: (ctx: RequestContext) => Promise<Reply> | Reply) =>
    host.http.route({ method, path: base + path, bucket: 'platform', scope, handler })
  const load = (ctx: RequestContext): ExportConfiguration => {
    const c = store.getForTeam(ctx.params.id, checkTeam(ctx))
    if (!c) throw notFound(`no export configuration ${ctx.params.id}`, 'id')
    return c
  }
  const iso = () => new Date(host.now()).toISOString()
  const writes = new KeyedSerial()

  route('GET', '', 'platform:read', (ctx) => {
    const team = checkTeam(ctx)
    const { page, size } = paging(ctx)
    const all = [...store.forTeam(team)].sort((a, b) => (a.id < b.id ? -1 : 1))
    return { status: 200, body: { data: all.slice(page * size, page * size + size).map((c) => view(d, c)), page: { size, number: page, totalElements: all.length } } }
  })

  /** One new configuration, its url's name resolved first; signed unless the body says otherwise. */
  const create = async (team: string, f: Partial<Fields>): Promise<Reply> => {
    await checkDestination(d, f.url)
    const now = iso()
    const c: ExportConfiguration = {
      id: 'exp_' + newId(host.now()),
      team,
      name: f.name!,
      url: f.url!,
      enabled: f.enabled ?? true,
      eventTypes: f.eventTypes ?? [...USAGE_EVENT_TYPES],
      filters: f.filters ?? {},
      batching: f.batching ?? null,
      timeoutMs: f.timeoutMs ?? null,
      createdAt: now,
      updatedAt: now,
    }
    // Signed from the first delivery unless the caller opts out: the secret is made now and
    // shown in this answer only (as by rotate-signing-secret), committed with the configuration.
    const done = await store.create(c, f.signingEnabled ?? true, host.now(), d.maxConfigurationsPerTeam)
    if (!done.created) throw tooMany()
    // Location names the created configuration (RFC 9110 §15.3.2), not the collection POSTed to.
    const location = `${base}/${c.id}`
    if (done.secret === undefined) return { status: 201, body: view(d, c), headers: { location } }
    return { status: 201, body: { ...view(d, c), signingSecret: done.secret }, headers: { location, 'cache-control': 'no-store' } }
  }
  const tooMany = () =>
    invalid('too_many_export_configurations', `a team holds at most ${d.maxConfigurationsPerTeam} export configurations (exportconfigs.max_configurations_per_team)`, undefined, 422)

  route('POST', '', 'platform:write', async (ctx) => {
    const team = checkTeam(ctx)
    const f = parseFields(d, await configBody(ctx), true)
    // The early answer, before the destination's name is resolved; the count that holds (a burst,
    // several workers) is made in the write transaction (store.create).
    if (store.forTeam(team).length >= d.maxConfigurationsPerTeam) throw tooMany()
    return create(team, f)
  })

  route('GET', '/:id', 'platform:read', (ctx) => ({ status: 200, body: view(d, load(ctx)) }))

  const update = (full: boolean) => async (ctx: RequestContext): Promise<Reply> => {
    load(ctx)
    const f = parseFields(d, await configBody(ctx), full)
    await checkDestination(d, f.url)
    return writes.run(ctx.params.id, () => apply(ctx, f, full))
  }
  /**
   * One change of a configuration at a time in this process (writes), over it as the one before
   * left it; a deletion meanwhile is a 404. Another worker's change committed after the read is
   * found in the write's transaction, and this change is merged over it again.
   */
  const apply = async (ctx: RequestContext, f: Partial<Fields>, full: boolean): Promise<Reply> => {
    let c = load(ctx)
    if (f.signingEnabled !== undefined && !(await store.setSigningEnabled(c.id, f.signingEnabled)))
      throw invalid('no_signing_secret', 'this configuration has no signing secret yet: call rotate-signing-secret', 'signingEnabled')
    c = load(ctx)
    const { signingEnabled: _s, ...fields } = f
    for (;;) {
      const next: ExportConfiguration = { ...c, ...fields, updatedAt: iso() }
      if (full) {
        next.enabled = f.enabled ?? true
        next.eventTypes = f.eventTypes ?? [...USAGE_EVENT_TYPES]
        next.filters = f.filters ?? {}
        next.batching = f.batching ?? null
        next.timeoutMs = f.timeoutMs ?? null
      }
      if (next.enabled) delete next.disabledReason
      const done = await store.update(next, c)
      if (done.outcome === 'replaced') return { status: 200, body: view(d, next) }
      if (done.outcome === 'gone') throw notFound(`no export configuration ${ctx.params.id}`, 'id')
      c = done.now
    }
  }
  route('PATCH', '/:id', 'platform:write', update(false))
  route('PUT', '/:id', 'platform:write', update(true))

  route('DELETE', '/:id', 'platform:write', (ctx) =>
    writes.run(ctx.params.id, async () => {
      const c = load(ctx)
      await store.remove(c)
      await engine.queue.dropConfig(c.id)
      return { status: 204 }
    }),
  )

  route('POST', '/:id/rotate-signing-secret', 'platform:write', async (ctx) => {
    const c = load(ctx)
    const body = await optionalJson(ctx)
    if (!isObject(body)) throw invalid('invalid_body', 'the body must be {} or {"immediate": true}')
    // null is absent (DESIGN's input rules; Python's None): the default rotation, with its overlap.
    if (body.immediate !== undefined && body.immediate !== null && typeof body.immediate !== 'boolean')
      throw invalid('invalid_field', 'immediate must be a boolean or null', 'immediate')
    const signingSecret = await store.rotate(c.id, body.immediate === true, host.now())
    if (signingSecret === undefined) throw notFound(`no export configuration ${ctx.params.id}`, 'id')
    // The only response that ever carries the secret; never logged.
    return { status: 200, body: { signingSecret }, headers: { 'cache-control': 'no-store' } }
  })

  route('POST', '/:id/send-test-event', 'platform:write', async (ctx) => {
    const c = load(ctx)
    await optionalJson(ctx)
    // The production path delivers nothing to a disabled configuration: a 202 would only be
    // followed by a dead letter the caller never sees.
    if (!c.enabled)
      throw conflict(
        'export_configuration_disabled',
        `the export configuration ${c.id} is disabled${c.disabledReason ? ` (${c.disabledReason})` : ''}: nothing is delivered to it, a test event neither; enable it (PATCH {"enabled": true}) and send the test again`,
      )
    const now = host.now()
    const event = {
      id: 'evt_' + newId(now),
      type: 'test' as const,
      created: new Date(now).toISOString(),
      teamId: c.team,
      data: { message: 'a test event from meterd', exportConfigurationId: c.id },
    }
    const [delivery] = await engine.enqueue([{ config: c, event }], { direct: true })
    return { status: 202, body: { eventId: event.id, deliveryId: delivery.id, status: delivery.status } }
  })

  route('GET', '/:id/deliveries', 'platform:read', (ctx) => {
    const c = load(ctx)
    const { page, size } = paging(ctx)
    const status = ctx.query.get('status') || undefined
    if (status && !['pending', 'succeeded', 'failed', 'dead_lettered'].includes(status))
      throw invalid('invalid_parameter', 'status must be pending, succeeded, failed or dead_lettered', 'status')
    const { items, total } = engine.queue.list(c.id, { limit: size, offset: page * size, status })
    return { status: 200, body: { data: items.map((x) => deliveryView(x, false)), page: { size, number: page, totalElements: total } } }
  })

  route('GET', '/:id/deliveries/:deliveryId', 'platform:read', (ctx) => {
    const c = load(ctx)
    const x = engine.queue.get(ctx.params.deliveryId)
    if (!x || x.configId !== c.id) throw notFound(`no delivery ${ctx.params.deliveryId}`, 'deliveryId')
    return { status: 200, body: deliveryView(x, true) }
  })

  route('POST', '/:id/recover', 'platform:write', async (ctx) => {
    const c = load(ctx)
    const since = ctx.query.get('since')
    if (!since || !isDateTime(since)) throw invalid('invalid_parameter', 'since is required: an ISO-8601 date-time', 'since')
    const ids = await engine.queue.recover(c.id, Date.parse(toIsoUtc(since)), host.now())
    engine.kick()
    return { status: 202, body: { requeued: ids.length, deliveryIds: ids } }
  })
}
