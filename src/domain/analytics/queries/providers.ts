import { ERROR, TOKEN_OVERFLOW, TOKENS } from '../block.js'
import { DIM } from '../dimensions.js'
import { percentiles } from '../rank.js'
import { selection, tokenTotals, type AnalyticsQuery, type TokenTotals } from '../query.js'
import type { TeamIndex } from '../team-index.js'
import { MoneySums } from '../units.js'

export interface Percentiles {
  p50: number | null
  p95: number | null
}

export interface ProviderStats {
  provider: string
  /** Only when grouped by model. */
  model?: string
  cost: bigint
  /** Completions. */
  requests: number
  errors: number
  /** errors / requests. */
  errorRate: number
  tokens: TokenTotals
  /** requestDuration, nearest rank. */
  latencyMs: Percentiles
  /** Over the completions whose time to first token is known (row.ts), nearest rank. */
  timeToFirstTokenMs: Percentiles
}

/**
 * Completions per provider, or per provider and model: cost, tokens by kind, requests, error
 * rate, latency and time to first token (p50, p95). Largest cost first.
 */
export function providerStats(team: TeamIndex | undefined, q: AnalyticsQuery, by: 'provider' | 'model'): ProviderStats[] {
  if (team === undefined) return []
  const providerOf = team.tupleDims[DIM.provider]
  const modelOf = team.tupleDims[DIM.model]
  // Each tuple's group, numbered densely: providers by their code, models by (provider, model).
  const groupOf = new Int32Array(team.tupleCount)
  const keys: [number, number][] = []
  const seen = new Map<number, number>()
  const models = team.dims[DIM.model].size
  for (let t = 0; t < team.tupleCount; t++) {
    const key = by === 'provider' ? providerOf[t] : providerOf[t] * models + modelOf[t]
    let g = seen.get(key)
    if (g === undefined) {
      seen.set(key, (g = keys.length))
      keys.push([providerOf[t], by === 'provider' ? 0 : modelOf[t]])
    }
    groupOf[t] = g
  }
  const size = keys.length
  const cost = new MoneySums(size)
  const requests = new Float64Array(size)
  const errors = new Float64Array(size)
  const tokens = new Float64Array(size * TOKENS)
  const latency: number[][] = Array.from({ length: size }, () => [])
  const ttft: number[][] = Array.from({ length: size }, () => [])
  team.each(selection(team, q, 'completion'), (b, rows, n) => {
    const { tuple, flags, cost: c, duration, ttft: first, tokens: tok } = b
    for (let j = 0; j < n; j++) {
      const i = rows[j]
      const g = groupOf[tuple[i]]
      requests[g]++
      if ((flags[i] & ERROR) !== 0) errors[g]++
      const units = c[i]
      if (units === units) cost.add(g, units)
      else cost.addBig(g, b.bigCost(i))
      const d = duration[i]
      if (d === d) latency[g].push(d)
      const f = first[i]
      if (f === f) ttft[g].push(f)
      for (let k = 0, at = i * TOKENS; k < TOKENS; k++, at++) {
        const v = tok[at]
        tokens[g * TOKENS + k] += v === TOKEN_OVERFLOW ? b.token(i, k) : v
      }
    }
  })
  const providers = team.dims[DIM.provider].values
  const modelNames = team.dims[DIM.model].values
  const out: ProviderStats[] = []
  for (let g = 0; g < size; g++) {
    if (requests[g] === 0) continue
    const [lp50, lp95] = percentiles(latency[g], [50, 95])
    const [tp50, tp95] = percentiles(ttft[g], [50, 95])
    out.push({
      provider: providers[keys[g][0]],
      ...(by === 'model' ? { model: modelNames[keys[g][1]] } : {}),
      cost: cost.get(g),
      requests: requests[g],
      errors: errors[g],
      errorRate: errors[g] / requests[g],
      tokens: tokenTotals(tokens, g * TOKENS),
      latencyMs: { p50: lp50, p95: lp95 },
      timeToFirstTokenMs: { p50: tp50, p95: tp95 },
    })
  }
  const name = (s: ProviderStats) => `${s.provider}\u0000${s.model ?? ''}`
  return out.sort((x, y) => (x.cost === y.cost ? (name(x) < name(y) ? -1 : 1) : x.cost > y.cost ? -1 : 1))
}
