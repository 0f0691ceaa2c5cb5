import { cacheOutsideInput } from './providers.js'

/**
 * How a source counts cache tokens against input tokens:
 * - `in-input`: cache reads and writes are part of the input count (the GenAI conventions,
 *   OpenInference, OpenLLMetry, the Vercel AI SDK 6's inputTokenDetails, Gemini CLI, Codex);
 * - `beside-input`: they are counted apart (Claude Code, Cursor, Anthropic's own usage);
 * - `native`: the count is the provider's own (the Vercel AI SDK before 6), which is already
 *   what REST clients of that provider send.
 */
export type CacheCounting = 'in-input' | 'beside-input' | 'native'

/** Token counts as a source reported them (absent = not reported). */
export interface ReportedUsage {
  input?: number
  output?: number
  cacheRead?: number
  cacheCreation?: number
  reasoning?: number
  total?: number
}

export interface RestCounts {
  inputTokenCount: number
  outputTokenCount: number
  totalTokenCount: number
  cacheReadTokenCount?: number
  cacheCreationTokenCount?: number
  reasoningTokenCount?: number
}

/**
 * The counts in meterd's REST meaning (wire-contract §1.5): for providers whose clients count
 * cache apart from input (Anthropic, Bedrock) inputTokenCount excludes cache tokens; for the
 * others (OpenAI, Google, …) it includes them. A source that counts the other way is converted,
 * and a total it reported moves with its input count; nothing goes below zero. Otherwise a
 * reported total is kept as sent (counts are never recomputed); without one, the total is
 * input + output.
 */
export function restCounts(u: ReportedUsage, counting: CacheCounting, provider: string, model: string): RestCounts {
  const cache = (u.cacheRead ?? 0) + (u.cacheCreation ?? 0)
  let shift = 0
  if (counting !== 'native' && cache > 0) {
    const outside = cacheOutsideInput(provider, model)
    if (counting === 'in-input' && outside) shift = -cache
    else if (counting === 'beside-input' && !outside) shift = cache
  }
  const input = Math.max(0, (u.input ?? 0) + shift)
  const output = u.output ?? 0
  const total = u.total === undefined ? input + output : Math.max(0, u.total + shift)
  const out: RestCounts = { inputTokenCount: input, outputTokenCount: output, totalTokenCount: total }
  if (u.cacheRead !== undefined) out.cacheReadTokenCount = u.cacheRead
  if (u.cacheCreation !== undefined) out.cacheCreationTokenCount = u.cacheCreation
  if (u.reasoning !== undefined) out.reasoningTokenCount = u.reasoning
  return out
}
