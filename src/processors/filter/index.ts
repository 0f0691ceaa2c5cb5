import { Type, type Static } from '@sinclair/typebox'
import type { CheckContext, CreateSettings, ProcessorFactory } from '../../host/component.js'
import type { ConfigIssue } from '../../core/config/schema.js'
import type { Batch, Consumer, Signal } from '../../core/consumer.js'
import { partOf, select } from '../../core/part.js'
import { tally } from '../../core/telemetry.js'
import { FIELD_CATALOGS, compileCondition, conditionIssue, type Predicate } from '../../domain/conditions/index.js'

const schema = Type.Object(
  {
    keep: Type.Optional(Type.String({ minLength: 1, description: 'Keep only the records that meet this condition (docs/routing.md); set keep or drop, not both' })),
    drop: Type.Optional(Type.String({ minLength: 1, description: 'Drop the records that meet this condition' })),
  },
  { additionalProperties: false },
)
type Config = Static<typeof schema>

function check(config: Config, ctx: CheckContext): ConfigIssue[] {
  if ((config.keep === undefined) === (config.drop === undefined)) return [{ path: ctx.path, message: 'set exactly one of keep or drop' }]
  const key = config.keep !== undefined ? 'keep' : 'drop'
  const bad = conditionIssue(config[key]!, ctx.signals, `${ctx.path}.${key}`)
  return bad ? [bad] : []
}

/**
 * Keeps or drops records by a condition. A dropped record was accepted and deliberately not
 * kept: the request is still answered 201 (with the record's id, which no store then holds), and
 * the record is counted in meterd_filter_dropped_items_total for this processor.
 */
export class FilterProcessor implements Consumer<unknown> {
  private readonly dropped: (n: number) => void
  private readonly keeps: Predicate

  constructor(private readonly settings: CreateSettings, config: Config, signal: Signal, private readonly next: Consumer<unknown>) {
    const when = compileCondition(config.keep ?? config.drop!, FIELD_CATALOGS[signal]!)
    this.keeps = config.keep !== undefined ? when : (item) => !when(item)
    const [processor, pipeline = ''] = settings.id.split('@')
    this.dropped = tally(settings.registry, 'meterd_filter_dropped_items_total', 'Items a filter processor dropped (answered as accepted, not kept)', ['processor', 'pipeline']).bind({ processor, pipeline })
  }

  async start(): Promise<void> {}
  async shutdown(): Promise<void> {}

  async consume(batch: Batch<unknown>): Promise<void> {
    const { items } = batch
    const kept = select(items, this.keeps)
    if (!kept) {
      this.settings.metrics.accepted(items.length)
      return this.next.consume(batch)
    }
    this.dropped(items.length - kept.items.length)
    this.settings.metrics.accepted(kept.items.length)
    if (kept.items.length === 0) return
    const { part, settle } = partOf(batch, kept.items, kept.index)
    try {
      await this.next.consume(part)
    } finally {
      settle()
    }
  }
}

export const filterFactory: ProcessorFactory<typeof schema> = {
  kind: 'processor',
  type: 'filter',
  description: 'Keeps or drops records by a condition; dropped records are still answered 201 and counted per processor',
  signals: ['usage', 'traces', 'logs'],
  mutatesData: false,
  schema,
  check,
  create: (settings, config, signal, next) => new FilterProcessor(settings, config, signal, next),
}
