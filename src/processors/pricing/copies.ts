import type { Copies } from '../../core/copies.js'
import type { ToolAggregates } from '../../domain/pricing/aggregates.js'
import type { ToolRecord } from '../../model/usage-record.js'
import type { Applied, Counted, SharedTierQuantities, ToolCharge } from '../../ports/tiers.js'

/*
 * Tier moves of a request whose records went down several pipelines at once (Copies): a pricing
 * processor in each of them prices its copy of a record, but the record moves the period's
 * aggregates once. The first copy priced moves them; every other copy gets that same result, so
 * all copies carry one cost and the period still adds up to C(total). Two processors whose
 * charges name the same aggregates (same scope, tool and period) share the move; processors
 * configured with another scope or billing period keep aggregates of their own, each moved once.
 */

/** The key a record's moves of its charge's aggregates are remembered under, for its copies. */
function movesOf(c: ToolCharge): string {
  return 'tier-moves\u0000' + c.scope.join('\u0000')
}

/**
 * ToolAggregates.applyInTransaction for a batch carrying copies: inside the request's write unit,
 * where every pipeline's steps run one after another in one transaction.
 */
export function applyOnce(
  aggregates: ToolAggregates,
  copies: Copies,
  charges: readonly ToolCharge[],
  records: readonly { r: ToolRecord }[],
  now: number,
  dedupWindowMs: number | undefined,
): Applied[] {
  const out: Applied[] = []
  for (let i = 0; i < charges.length; i++) {
    const key = movesOf(charges[i])
    let applied = copies.recall<Applied>(records[i].r, key)
    if (applied === undefined) {
      applied = aggregates.applyInTransaction([charges[i]], now, dedupWindowMs)[0]
      copies.remember(records[i].r, key, applied)
    }
    out.push(applied)
  }
  return out
}

/** One record's move of its charge's aggregates in Redis, shared by the copies of the record. */
interface SharedMove {
  /** The count() the record's charge was part of, and its index there. */
  counted: Promise<Counted>
  index: number
  /** Given back already (by the processor of another copy): never twice. */
  givenBack: boolean
}

/**
 * SharedTierQuantities.count for a batch carrying copies (gateway). The pipelines price at once,
 * so a record's move is remembered as soon as it is asked for, and a copy priced meanwhile waits
 * for that same move. The records no copy has moved yet are counted together, as without copies.
 * A copy whose request then fails unstored gives back the moves of the records it priced,
 * whichever pipeline counted them, and each move once (Counted.giveBack's `only`). When a count
 * fails (Redis is gone) the batch fails, after giving back (`giveBack`) what it counted itself:
 * none of its records went on.
 */
export async function countOnce(
  tiers: SharedTierQuantities,
  copies: Copies,
  charges: readonly ToolCharge[],
  records: readonly { r: ToolRecord }[],
  now: number,
  giveBack: (counted: Counted) => Promise<void>,
): Promise<Counted> {
  const moves: SharedMove[] = []
  const fresh: ToolCharge[] = []
  const own: SharedMove[] = []
  let settle!: { resolve(c: Counted): void; reject(err: unknown): void }
  const counted = new Promise<Counted>((resolve, reject) => (settle = { resolve, reject }))
  // A failed count is thrown below, and read by every copy that awaits it.
  counted.catch(() => {})
  for (let i = 0; i < charges.length; i++) {
    const key = movesOf(charges[i])
    let move = copies.recall<SharedMove>(records[i].r, key)
    if (move === undefined) {
      move = { counted, index: fresh.length, givenBack: false }
      copies.remember(records[i].r, key, move)
      fresh.push(charges[i])
      own.push(move)
    }
    moves.push(move)
  }
  if (fresh.length) tiers.count(fresh, now).then(settle.resolve, settle.reject)
  else settle.resolve(NOTHING_COUNTED)
  try {
    const applied = await Promise.all(moves.map((m) => m.counted.then((c) => c.applied[m.index])))
    return { applied, giveBack: () => giveBackMoves(moves) }
  } catch (err) {
    await giveBack({ applied: [], giveBack: () => giveBackMoves(own) })
    throw err
  }
}

const NOTHING_COUNTED: Counted = { applied: [], giveBack: async () => {} }

/** Gives back the moves not given back yet: those of one count() together (exact as without copies). */
async function giveBackMoves(moves: readonly SharedMove[]): Promise<void> {
  const byCount = new Map<Promise<Counted>, number[]>()
  for (const m of moves) {
    if (m.givenBack) continue
    m.givenBack = true
    const list = byCount.get(m.counted)
    if (list) list.push(m.index)
    else byCount.set(m.counted, [m.index])
  }
  const results = await Promise.allSettled(
    [...byCount].map(async ([counted, only]) => {
      const c = await counted.catch(() => undefined) // a failed count moved nothing (it gave its moves back itself)
      if (c) await c.giveBack(only)
    }),
  )
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected')
  if (failed) throw failed.reason
}
