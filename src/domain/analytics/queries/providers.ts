import { ERROR, TOKEN_OVERFLOW, TOKENS } from '../block.js'
import { DIM } from '../dimensions.js'
import { GroupedValues } from '../grouped-values.js'
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
  const providerOf = team.tupleColumn('provider')
  const modelOf = team.tupleColumn('model')
  // Each tuple's group: a provider's own code, or a (provider, model) pair numbered on first sight.
  const groupOf = new Int32Array(team.tupleCount)
  const providerCount = team.dims[DIM.provider].size
  const models = team.dims[DIM.model].size
  const keys: [number, number][] = []
  if (by === 'provider') {
    for (let p = 0; p < providerCount; p++) keys.push([p, 0])
    for (let t = 0; t < team.tupleCount; t++) groupOf[t] = providerOf[t]
  } else {
    const pair = new Int32Array(providerCount * models).fill(-1)
    for (let t = 0; t < team.tupleCount; t++) {
      const k = providerOf[t] * models + modelOf[t]
      if (pair[k] === -1) {
        pair[k] = keys.length
        keys.push([providerOf[t], modelOf[t]])
      }
      groupOf[t] = pair[k]
    }
  }
  const size = keys.length
  const cost = new MoneySums(size)
  const requests = new Float64Array(size)
  const errors = new Float64Array(size)
  const tokens = new Float64Array(size * TOKENS)
  const latency = new GroupedValues(size, team.rows)
  const ttft = new GroupedValues(size, team.rows)
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
      if (d === d) latency.push(g, d)
      const f = first[i]
      if (f === f) ttft.push(g, f)
      for (let k = 0, at = i * TOKENS; k < TOKENS; k++, at++) {
        const v = tok[at]
        tokens[g * TOKENS + k] += v === TOKEN_OVERFLOW ? b.token(i, k) : v
      }
    }
  })
  const providers = team.dims[DIM.provider].values
  const modelNames = team.dims[DIM.model].values
  const latencies = latency.percentiles([50, 95])
  const ttfts = ttft.percentiles([50, 95])
  const out: ProviderStats[] = []
  for (let g = 0; g < size; g++) {
    if (requests[g] === 0) continue
    const [lp50, lp95] = latencies[g]
    const [tp50, tp95] = ttfts[g]
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
