import { newId } from '../../core/ids.js'
import type { UsageRecord } from '../../model/usage-record.js'
import type { EventType, ExportConfiguration, FilterField, WebhookEvent } from '../../domain/webhooks/model.js'
import { toResource } from '../../model/resource.js'

const TYPE_OF: Record<UsageRecord['kind'], EventType> = { completion: 'usage.completion', tool: 'usage.tool', image: 'usage.image', audio: 'usage.audio', video: 'usage.video' }

/** A record's value for each filter field. */
function fieldOf(r: UsageRecord, f: FilterField): string {
  switch (f) {
    case 'organizationName':
    case 'productName':
    case 'agent':
    case 'subscriberId':
    case 'environment':
    case 'traceId':
      return r.attribution[f] || (f === 'environment' ? r.caller.environment : '')
    case 'model':
      return r.kind === 'tool' ? '' : String(r.body.model ?? '')
    case 'provider':
      return r.kind === 'tool' ? '' : String(r.body.provider ?? '').toLowerCase()
    case 'toolId':
      return r.kind === 'tool' ? r.body.toolId : ''
  }
}

/** Whether a configuration wants a record: enabled, subscribed to its type, and every filter matches. */
export function wants(c: ExportConfiguration, r: UsageRecord): boolean {
  if (!c.enabled || !c.eventTypes.includes(TYPE_OF[r.kind] as never)) return false
  for (const [f, values] of Object.entries(c.filters)) {
    if (!values || values.length === 0) continue
    const v = fieldOf(r, f as FilterField)
    if (!values.some((x) => (f === 'provider' ? x.toLowerCase() === v : x === v))) return false
  }
  return true
}

/** The event a usage record becomes: `data` is the record as the read API shows it. */
export function usageEvent(r: UsageRecord, now: number): WebhookEvent {
  return {
    id: 'evt_' + newId(now),
    type: TYPE_OF[r.kind],
    created: new Date(now).toISOString(),
    teamId: r.caller.team,
    data: toResource(r),
  }
}
