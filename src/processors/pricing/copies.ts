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
  counted: Promise<Counted>
  /** Given back already (by the processor of another copy): never twice. */
  givenBack: boolean
}

/**
 * SharedTierQuantities.count for a batch carrying copies (gateway). The pipelines price at once,
 * so a record's move is remembered as soon as it is asked for, and a copy priced meanwhile waits
 * for that same move. Each record is counted on its own (the copies path only): a copy whose
 * request then fails gives back the moves of the records it priced, whichever pipeline counted
 * them, and each move is given back once. When a count fails (Redis is gone) the batch fails,
 * after giving back (`giveBack`) the moves it counted itself: none of its records went on.
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
  const own: SharedMove[] = []
  for (let i = 0; i < charges.length; i++) {
    const key = movesOf(charges[i])
    let move = copies.recall<SharedMove>(records[i].r, key)
    if (move === undefined) {
      move = { counted: tiers.count([charges[i]], now), givenBack: false }
      // A failed count is read (and thrown) by every copy that awaits it below.
      move.counted.catch(() => {})
      copies.remember(records[i].r, key, move)
      own.push(move)
    }
    moves.push(move)
  }
  try {
    const applied = await Promise.all(moves.map((m) => m.counted.then((c) => c.applied[0])))
    return { applied, giveBack: () => giveBackMoves(moves) }
  } catch (err) {
    await giveBack({ applied: [], giveBack: () => giveBackMoves(own) })
    throw err
  }
}

/** Gives back the moves not given back yet, the latest first (each is exact when nothing moved its aggregate since). */
async function giveBackMoves(moves: readonly SharedMove[]): Promise<void> {
  let failed: unknown
  for (let i = moves.length - 1; i >= 0; i--) {
    const m = moves[i]
    if (m.givenBack) continue
    m.givenBack = true
    const counted = await m.counted.catch(() => undefined)
    if (counted) await counted.giveBack().catch((err) => void (failed ??= err))
  }
  if (failed !== undefined) throw failed
}
