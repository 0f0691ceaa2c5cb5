import { ToolRegistry } from '../tools/registry.js'
import type { Cost, UsageKind, UsageRecord } from '../../model/usage-record.js'
import type { Store } from '../../store/store.js'
import { UNPRICED_END, UNPRICED_START, unpricedKey } from '../../store/usage-store.js'
import { ToolAggregates } from './aggregates.js'
import { priceMedia, type MediaPriceBook } from './media-price-book.js'
import { priceCompletion, type PriceBook } from './price-book.js'
import { toolCharge, toolCost, type ToolPricingOptions } from './tool-pricing.js'

export interface RepriceOptions {
  /** Inclusive ISO lower bound on event time. */
  from?: string
  /** Exclusive ISO upper bound on event time. */
  to?: string
  kind?: UsageKind
  team?: string
  dryRun?: boolean
  now: number
  /**
   * Called with each record as newly priced, inside the transaction that stores it: what it
   * writes commits with the new price (the clickhouse queues' new rows: src/exporters/clickhouse/queue.ts).
   */
  onPriced?: (r: UsageRecord) => void
}

/** The price books records are priced from: tokens for completions, units for images, audio and video. */
export interface PriceBooks {
  book: PriceBook
  media: MediaPriceBook
}

export interface RepriceResult {
  /** Unpriced records in the range. */
  examined: number
  /** Records that got a price (or would, with dryRun). */
  priced: number
  /** Records still without one (model still unknown, tool still unregistered or disabled). */
  unpriced: number
  ids: string[]
}

/**
 * `meterd reprice`: gives a price to records stored unpriced, now that their model is in the
 * book or their tool registered. Each record is updated in one LMDB transaction with its tool
 * aggregates and its index entry, so a crash or a second run never counts an event twice.
 */
export async function reprice(store: Store, books: PriceBooks, registry: ToolRegistry, tools: ToolPricingOptions, o: RepriceOptions): Promise<RepriceResult> {
  const { index, records } = store.usage
  const aggregates = new ToolAggregates(store)
  const result: RepriceResult = { examined: 0, priced: 0, unpriced: 0, ids: [] }
  const keys = [...index.getKeys({ start: UNPRICED_START, end: UNPRICED_END })]
  for (const key of keys) {
    const [, team, kind, eventTime, id] = key as [string, string, UsageKind, string, string]
    if ((o.team !== undefined && team !== o.team) || (o.kind !== undefined && kind !== o.kind)) continue
    if ((o.from !== undefined && eventTime < o.from) || (o.to !== undefined && eventTime >= o.to)) continue
    const r = records.get(id)
    if (!r || r.cost?.source !== 'unpriced') continue
    result.examined++
    const ok = o.dryRun ? wouldPrice(r, books, registry) : await priceOne(store, r, books, registry, aggregates, tools, o.now, o.onPriced)
    if (ok) {
      result.priced++
      result.ids.push(id)
    } else result.unpriced++
  }
  await store.root.flushed
  return result
}

/** The cost of a completion or media record by the books (tool events are priced by the registry). */
function modelCost(r: Exclude<UsageRecord, { kind: 'tool' }>, books: PriceBooks): Cost {
  return r.kind === 'completion' ? priceCompletion(books.book, r.body) : priceMedia(books.media, r.kind, r.body)
}

function wouldPrice(r: UsageRecord, books: PriceBooks, registry: ToolRegistry): boolean {
  if (r.kind !== 'tool') return modelCost(r, books).source !== 'unpriced'
  return registry.byToolId(r.caller.team, r.body.toolId)?.enabled === true
}

async function priceOne(
  store: Store,
  r: UsageRecord,
  books: PriceBooks,
  registry: ToolRegistry,
  aggregates: ToolAggregates,
  tools: ToolPricingOptions,
  now: number,
  onPriced?: (r: UsageRecord) => void,
): Promise<boolean> {
  const { index, records } = store.usage
  let done = false
  if (r.kind !== 'tool') {
    const cost = modelCost(r, books)
    if (cost.source === 'unpriced') return false
    await store.root.transaction(() => {
      const cur = records.get(r.id)
      if (!cur || cur.cost?.source !== 'unpriced') return
      const priced = { ...cur, cost }
      records.put(r.id, priced)
      index.remove(unpricedKey(cur))
      onPriced?.(priced)
      done = true
    })
    return done
  }
  const tool = registry.byToolId(r.caller.team, r.body.toolId)
  if (!tool || !tool.enabled) return false
  await store.root.transaction(() => {
    const cur = records.get(r.id)
    if (!cur || cur.kind !== 'tool' || cur.cost?.source !== 'unpriced') return
    const [applied] = aggregates.applyInTransaction([toolCharge(cur, tool, tools)], now)
    const priced = { ...cur, cost: toolCost(cur, tool, applied) }
    records.put(r.id, priced)
    index.remove(unpricedKey(cur))
    onPriced?.(priced)
    done = true
  })
  return done
}
