import { TOKEN_OVERFLOW, TOKENS, TOOL } from '../block.js'
import { DIM } from '../dimensions.js'
import { selection, tokenTotals, type AnalyticsQuery, type TokenTotals } from '../query.js'
import type { TeamIndex } from '../team-index.js'
import { MoneySums } from '../units.js'

/** Money in units of 10^-12 USD (units.ts). */
export interface AgentCost {
  /** null: the records that name no agent. */
  agent: string | null
  tokenCost: bigint
  toolCost: bigint
  totalCost: bigint
  completions: number
  toolEvents: number
  tokens: TokenTotals
}

/** Token cost (completions) against tool cost (tool events) per agent, largest total first. */
export function agentsCost(team: TeamIndex | undefined, q: AnalyticsQuery): AgentCost[] {
  if (team === undefined) return []
  const agentOf = team.tupleColumn('agent')
  const size = team.dims[DIM.agent].size
  const tokenCost = new MoneySums(size)
  const toolCost = new MoneySums(size)
  const completions = new Float64Array(size)
  const toolEvents = new Float64Array(size)
  const tokens = new Float64Array(size * TOKENS)
  team.each(selection(team, q), (b, rows, n) => {
    const { tuple, flags, cost, tokens: tok } = b
    for (let j = 0; j < n; j++) {
      const i = rows[j]
      const a = agentOf[tuple[i]]
      const c = cost[i]
      if ((flags[i] & TOOL) !== 0) {
        toolEvents[a]++
        if (c === c) toolCost.add(a, c)
        else toolCost.addBig(a, b.bigCost(i))
      } else {
        completions[a]++
        if (c === c) tokenCost.add(a, c)
        else tokenCost.addBig(a, b.bigCost(i))
        for (let k = 0, at = i * TOKENS; k < TOKENS; k++, at++) {
          const t = tok[at]
          tokens[a * TOKENS + k] += t === TOKEN_OVERFLOW ? b.token(i, k) : t
        }
      }
    }
  })
  const out: AgentCost[] = []
  const names = team.dims[DIM.agent].values
  for (let a = 0; a < size; a++) {
    if (completions[a] === 0 && toolEvents[a] === 0) continue
    const token = tokenCost.get(a)
    const tool = toolCost.get(a)
    out.push({
      agent: a === 0 ? null : names[a],
      tokenCost: token,
      toolCost: tool,
      totalCost: token + tool,
      completions: completions[a],
      toolEvents: toolEvents[a],
      tokens: tokenTotals(tokens, a * TOKENS),
    })
  }
  return out.sort((x, y) => (x.totalCost === y.totalCost ? byName(x.agent, y.agent) : x.totalCost > y.totalCost ? -1 : 1))
}

/** Names ascending, the no-agent group last. */
export function byName(x: string | null, y: string | null): number {
  if (x === y) return 0
  if (x === null) return 1
  if (y === null) return -1
  return x < y ? -1 : 1
}
