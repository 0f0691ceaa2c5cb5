import type { CreateSettings, ProcessorFactory } from '../../host/component.js'
import type { Batch, Consumer } from '../../core/consumer.js'
import { tally } from '../../core/telemetry.js'
import type { Attribution, UsageRecord } from '../../model/usage-record.js'
import { attributionDescriptor, type Config } from './descriptor.js'

/**
 * A dimension's text, trimmed. Most values have nothing to trim: when the first and the last
 * character are printable ASCII the string is its own trim, and String#trim (a builtin call
 * per dimension, 13 per record) is skipped.
 */
const text = (v: unknown): string => {
  if (typeof v !== 'string') return ''
  const n = v.length
  if (n === 0) return v
  const first = v.charCodeAt(0)
  const last = v.charCodeAt(n - 1)
  return first > 32 && first < 127 && last > 32 && last < 127 ? v : v.trim()
}

/** The attribution dimensions of DESIGN §2, normalised from a record's body. */
export function attributionOf(r: UsageRecord): Attribution {
  const b = r.body as Record<string, any>
  const sub = b.subscriber && typeof b.subscriber === 'object' ? b.subscriber : {}
  const cred = sub.credential && typeof sub.credential === 'object' ? sub.credential : {}
  return {
    // Tool events carry SPEC's organizationId / product; completions drop the legacy aliases earlier.
    organizationName: text(b.organizationName) || (r.kind === 'tool' ? text(b.organizationId) : ''),
    productName: text(b.productName) || (r.kind === 'tool' ? text(b.product) : ''),
    subscriberId: text(sub.id),
    subscriberEmail: text(sub.email).toLowerCase(),
    subscriberCredentialName: text(cred.name) || (r.kind === 'tool' ? text(b.subscriberCredential) : ''),
    agent: text(b.agent),
    traceId: text(b.traceId),
    workflowId: text(b.workflowId),
    taskType: text(b.taskType),
    subscriptionId: text(b.subscriptionId),
    ticketId: text(b.ticketId),
    environment: text(b.environment),
    region: text(b.region),
  }
}

/**
 * Normalises the attribution dimensions and stamps the caller's identity (account,
 * tenant, team, environment) from the API key, never from the body. Records missing
 * SPEC's required organization/product are kept, marked unattributed and counted.
 */
export class AttributionProcessor implements Consumer {
  private readonly unattributed

  constructor(private readonly settings: CreateSettings, private readonly config: Config, private readonly next: Consumer) {
    this.unattributed = tally(settings.registry, 'meterd_unattributed_records_total', 'Records stored without organizationName or productName', ['kind'])
  }

  async start(): Promise<void> {}
  async shutdown(): Promise<void> {}

  /**
   * Not an async function: it hands on the next stage's promise as it is (no promise of its own,
   * no microtask turn to resume it); a failure of its own is returned as a rejection, as an
   * async function's would be.
   */
  consume(batch: Batch<UsageRecord>): Promise<void> {
    try {
      const caller = batch.ctx.caller
      for (const r of batch.items) {
        if (caller) r.caller = { account: caller.account, tenant: caller.tenant, team: caller.team, environment: caller.environment, keyId: caller.keyId }
        const a = attributionOf(r)
        if (!a.environment && this.config.default_environment_from_key) a.environment = r.caller.environment
        r.attribution = a
        r.attributed = a.organizationName !== '' && a.productName !== ''
        if (!r.attributed) this.unattributed.inc({ kind: r.kind })
      }
      this.settings.metrics.accepted(batch.items.length)
      return this.next.consume(batch)
    } catch (err) {
      return Promise.reject(err)
    }
  }
}

export const attributionFactory: ProcessorFactory<typeof attributionDescriptor.schema> = {
  ...attributionDescriptor,
  create: (settings, config, _signal, next) => new AttributionProcessor(settings, config, next),
}
