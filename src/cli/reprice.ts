import { UsageError, type Command } from './command.js'
import { configOrExit } from './config.js'
import { checkAgainst } from '../core/config/schema.js'
import { declaredTools, schema as toolsSchema } from '../extensions/tools/descriptor.js'
import { ToolRegistry } from '../domain/tools/registry.js'
import { isDateTime } from '../model/schemas.js'
import { USAGE_KINDS, type UsageKind } from '../model/usage-record.js'
import { loadMediaPriceBook, loadPriceBook, schema as pricingSchema, toolOptions } from '../processors/pricing/descriptor.js'
import { reprice } from '../domain/pricing/reprice.js'
import { withStore } from './store.js'
import { queueRepriced } from '../exporters/clickhouse/queue.js'

export type RepriceValues = { config?: string[]; from?: string; to?: string; kind?: string; team?: string; 'dry-run'?: boolean; json?: boolean }

/**
 * `meterd reprice` (its definition is in main.ts): prices the records stored unpriced whose event time is in [from, to), with
 * the price book and tool registry of the given config. Safe beside a running daemon (LMDB is
 * shared across processes and every update is one transaction).
 */
export async function repriceCommand(v: RepriceValues, command: Command): Promise<number> {
  // The usage shown with a wrong value is reprice's, not the list of every command.
  for (const f of ['from', 'to'] as const) if (v[f] !== undefined && !isDateTime(v[f]!)) throw new UsageError(`reprice: --${f} must be an ISO-8601 date-time`, command)
  if (v.kind !== undefined && !USAGE_KINDS.includes(v.kind as UsageKind)) throw new UsageError(`reprice: --kind must be one of ${USAGE_KINDS.join(', ')}`, command)
  const { config } = configOrExit(v.config ?? [])
  const pricing = checkAgainst(pricingSchema, config.processors.pricing ?? {}, 'processors.pricing')
  const tools = checkAgainst(toolsSchema, config.extensions.tools ?? {}, 'extensions.tools')
  const issues = [...pricing.issues, ...tools.issues]
  if (issues.length) throw new Error(issues.map((i) => `${i.path}: ${i.message}`).join('\n'))
  return withStore({ path: config.storage.path, maxSizeMb: config.storage.max_size_mb }, 'the rest was not repriced', async (store) => {
    const registry = new ToolRegistry(store, declaredTools(tools.value))
    const books = { book: loadPriceBook(pricing.value), media: loadMediaPriceBook(pricing.value) }
    const result = await reprice(store, books, registry, toolOptions(pricing.value), {
      from: v.from && new Date(v.from).toISOString(),
      to: v.to && new Date(v.to).toISOString(),
      kind: v.kind as UsageKind | undefined,
      team: v.team,
      dryRun: v['dry-run'],
      now: Date.now(),
      // Records already in ClickHouse get their new row there too (docs/clickhouse.md).
      onPriced: queueRepriced(store, Date.now),
    })
    if (v.json) process.stdout.write(JSON.stringify(result) + '\n')
    else
      process.stdout.write(
        `${v['dry-run'] ? 'would price' : 'priced'} ${result.priced} of ${result.examined} unpriced record${result.examined === 1 ? '' : 's'}; ${result.unpriced} still unpriced\n`,
      )
    return 0
  })
}
