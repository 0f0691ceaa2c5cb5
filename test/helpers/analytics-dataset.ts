/** The seeded data set of the analytics query tests (not a test itself). */
import type { SeedRecord } from './analytics.js'

export const NOW = Date.parse('2026-11-22T12:00:00.000Z')
export const HOUR = 3_600_000
export const DAY = 24 * HOUR
/** Tools registered before seeding; 'ghost' is not, so its events are stored unpriced (cost 0). */
export const REGISTERED = new Set(['search', 'scrape'])

/** mulberry32: a small deterministic generator, so every run seeds the same records. */
function prng(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** 20 one-completion traces on 2026-11-10 whose costs put percentiles on exact rank boundaries; rank 10 and 11 tie. */
export const RANK_DAY = { from: '2026-11-10T00:00:00.000Z', to: '2026-11-11T00:00:00.000Z' }
export const RANK_COSTS = ['0.01', '0.02', '0.03', '0.04', '0.05', '0.06', '0.07', '0.08', '0.09', '0.1', '0.1', '0.12', '0.13', '0.14', '0.15', '0.16', '0.17', '0.18', '0.19', '0.2']

/** One trace alone in its day. */
export const SOLO_DAY = { from: '2026-11-05T00:00:00.000Z', to: '2026-11-06T00:00:00.000Z' }

export function dataset(): SeedRecord[] {
  const out: SeedRecord[] = []
  // Shuffled, so the traces are not stored in cost order.
  const order = [13, 2, 19, 7, 0, 11, 5, 17, 9, 3, 15, 1, 12, 18, 6, 10, 4, 16, 8, 14]
  for (const k of order)
    out.push({ kind: 'completion', time: new Date(Date.parse(RANK_DAY.from) + (k + 1) * HOUR).toISOString(), cost: RANK_COSTS[k], traceId: `rank-${k}`, agent: 'ranker', durationMs: 100 })

  out.push({ kind: 'completion', time: '2026-11-05T10:00:00.000Z', cost: '0.25', traceId: 'solo', agent: 'planner', durationMs: 1500, tokens: { input: 100, output: 50, reasoning: 0, cacheRead: 0, cacheCreation: 0, total: 150 } })
  out.push({ kind: 'tool', time: '2026-11-05T10:00:02.000Z', cost: '0.5', traceId: 'solo', toolId: 'search', durationMs: 300 })

  // A trace spanning two UTC days, its tool event without an agent.
  out.push({ kind: 'completion', time: '2026-11-21T23:30:00.000Z', cost: '0.3', traceId: 'span', agent: 'planner', durationMs: 2000, ttft: 400, sendTtft: true, tokens: { input: 1000, output: 200, reasoning: 0, cacheRead: 0, cacheCreation: 0, total: 1200 } })
  out.push({ kind: 'tool', time: '2026-11-22T00:30:00.000Z', cost: '0.75', traceId: 'span', toolId: 'scrape', durationMs: 60_000 })

  // The broad part: 48 hours up to NOW (the default window and the one before it).
  const rnd = prng(42)
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]
  const pool = ['0.004', '0.0125', '0.02']
  for (let i = 0; i < 420; i++) {
    const time = new Date(NOW - 2 * DAY + Math.floor(rnd() * 2 * DAY)).toISOString()
    const tool = rnd() < 0.3
    const cost = rnd() < 0.2 ? pick(pool) : (rnd() * 0.05).toFixed(9)
    const base = {
      time,
      cost,
      traceId: rnd() < 0.8 ? `t-${Math.floor(rnd() * 70)}` : undefined,
      org: pick(['Acme', 'Globex']),
      product: pick(['Gold', 'Silver']),
      subscriber: pick(['u1', 'u2', 'u3', undefined]),
      env: pick(['prod', 'staging']),
      durationMs: 1 + Math.floor(rnd() * 5000),
      error: rnd() < 0.1,
    }
    if (tool) {
      out.push({ ...base, kind: 'tool', toolId: pick(['search', 'scrape', 'ghost']), agent: rnd() < 0.3 ? undefined : pick(['planner', 'writer', 'critic']) })
    } else {
      const provider = pick(['OpenAI', 'openai', 'Anthropic'])
      const model = provider === 'Anthropic' ? 'claude-sonnet-4-5' : pick(['gpt-4o-mini', 'gpt-4o'])
      const input = Math.floor(rnd() * 5000)
      const output = Math.floor(rnd() * 800)
      const cacheRead = Math.floor(rnd() * 1000)
      const r = rnd()
      out.push({
        ...base,
        kind: 'completion',
        provider,
        model,
        agent: pick(['planner', 'writer', 'critic', undefined]),
        ttft: r < 0.8 ? 1 + Math.floor(rnd() * base.durationMs) : undefined,
        sendTtft: r < 0.5,
        tokens: { input, output, reasoning: Math.floor(output / 4), cacheRead, cacheCreation: 0, total: input + output },
      })
    }
  }
  return out
}
