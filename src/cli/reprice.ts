import { parseArgs } from 'node:util'
import { checkAgainst, type MeterdConfig } from '../core/config/schema.js'
import { schema as toolsSchema } from '../extensions/tools/index.js'
import { declaredTools } from '../extensions/tools/index.js'
import { ToolRegistry } from '../domain/tools/registry.js'
import { isDateTime } from '../model/schemas.js'
import { USAGE_KINDS, type UsageKind } from '../model/usage-record.js'
import { loadMediaPriceBook, loadPriceBook, schema as pricingSchema, toolOptions } from '../processors/pricing/index.js'
import { reprice } from '../domain/pricing/reprice.js'
import { Store } from '../store/store.js'

export const REPRICE_USAGE = '  reprice [--from ISO] [--to ISO] [--kind completion|tool|image|audio|video] [--team T] [--dry-run] [--json]'

class UsageError extends Error {
  exitCode = 64
}

/**
 * `meterd reprice`: prices the records stored unpriced whose event time is in [from, to), with
 * the price book and tool registry of the given config. Safe beside a running daemon (LMDB is
 * shared across processes and every update is one transaction).
 */
export async function repriceCommand(args: string[], configOrExit: (files: string[]) => { config: MeterdConfig }): Promise<number> {
  let parsed
  try {
    parsed = parseArgs({
      args,
      options: {
        config: { type: 'string', multiple: true, short: 'c' },
        from: { type: 'string' },
        to: { type: 'string' },
        kind: { type: 'string' },
        team: { type: 'string' },
        'dry-run': { type: 'boolean' },
        json: { type: 'boolean' },
      },
    })
  } catch (err) {
    throw new UsageError(`${(err as Error).message}\nusage: meterd${REPRICE_USAGE}`)
  }
  const v = parsed.values
  for (const f of ['from', 'to'] as const) if (v[f] !== undefined && !isDateTime(v[f]!)) throw new UsageError(`--${f} must be an ISO-8601 date-time`)
  if (v.kind !== undefined && !USAGE_KINDS.includes(v.kind as UsageKind)) throw new UsageError(`--kind must be one of ${USAGE_KINDS.join(', ')}`)
  const { config } = configOrExit(v.config ?? [])
  const pricing = checkAgainst(pricingSchema, config.processors.pricing ?? {}, 'processors.pricing')
  const tools = checkAgainst(toolsSchema, config.extensions.tools ?? {}, 'extensions.tools')
  const issues = [...pricing.issues, ...tools.issues]
  if (issues.length) throw new Error(issues.map((i) => `${i.path}: ${i.message}`).join('\n'))
  const store = new Store({ path: config.storage.path, maxSizeMb: config.storage.max_size_mb })
  try {
    const registry = new ToolRegistry(store, declaredTools(tools.value))
    const books = { book: loadPriceBook(pricing.value), media: loadMediaPriceBook(pricing.value) }
    const result = await reprice(store, books, registry, toolOptions(pricing.value), {
      from: v.from && new Date(v.from).toISOString(),
      to: v.to && new Date(v.to).toISOString(),
      kind: v.kind as UsageKind | undefined,
      team: v.team,
      dryRun: v['dry-run'],
      now: Date.now(),
    })
    if (v.json) process.stdout.write(JSON.stringify(result) + '\n')
    else
      process.stdout.write(
        `${v['dry-run'] ? 'would price' : 'priced'} ${result.priced} of ${result.examined} unpriced record${result.examined === 1 ? '' : 's'}; ${result.unpriced} still unpriced\n`,
      )
    return 0
  } finally {
    await store.close()
  }
}
