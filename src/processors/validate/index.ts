import type { CreateSettings, ProcessorFactory } from '../../host/component.js'
import type { Batch, Consumer } from '../../core/consumer.js'
import { PermanentError } from '../../core/errors.js'
import { checkBody, toIsoUtc } from '../../model/schemas.js'
import type { UsageRecord } from '../../model/usage-record.js'
import { validateDescriptor, type Config } from './descriptor.js'

/**
 * Checks every record against its kind's schema (required fields, types, ranges, enums,
 * timestamps) and sets its event time. A batch is all-or-nothing: the first bad record
 * fails it with a PermanentError naming the field and, in a batch, its index.
 */
export class ValidateProcessor implements Consumer {
  constructor(private readonly settings: CreateSettings, private readonly config: Config, private readonly next: Consumer) {}

  async start(): Promise<void> {}
  async shutdown(): Promise<void> {}

  /**
   * Not an async function: it hands on the next stage's promise as it is (no promise of its own,
   * no microtask turn to resume it); a refusal is returned as a rejection, as an async
   * function's would be.
   */
  consume(batch: Batch<UsageRecord>): Promise<void> {
    try {
      this.check(batch)
      return this.next.consume(batch)
    } catch (err) {
      return Promise.reject(err)
    }
  }

  private check(batch: Batch<UsageRecord>): void {
    const many = batch.items.length > 1
    for (let i = 0; i < batch.items.length; i++) {
      const r = batch.items[i]
      const problem = checkBody(r.kind, r.body)
      if (problem) {
        this.settings.metrics.refused(batch.items.length)
        throw new PermanentError(problem.message, problem.code, problem.param, many ? i : undefined)
      }
      if (this.config.strict_attribution) {
        const org = r.body.organizationName ?? (r.kind === 'tool' ? r.body.organizationId : undefined)
        const product = r.body.productName ?? (r.kind === 'tool' ? r.body.product : undefined)
        const missing = !org ? 'organizationName' : !product ? 'productName' : undefined
        if (missing) {
          this.settings.metrics.refused(batch.items.length)
          throw new PermanentError(`${missing} is required`, 'missing_field', missing, many ? i : undefined)
        }
      }
      r.eventTime = toIsoUtc(r.kind === 'tool' ? r.body.timestamp : r.body.requestTime)
    }
    this.settings.metrics.accepted(batch.items.length)
  }
}

export const validateFactory: ProcessorFactory<typeof validateDescriptor.schema> = {
  ...validateDescriptor,
  create: (settings, config, _signal, next) => new ValidateProcessor(settings, config, next),
}
