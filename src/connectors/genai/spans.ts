import type { SpanItem } from '../../model/otlp.js'
import { completionBody, finishBody, iso, nanosToMs, transactionId, type CompletionDraft, type MapSettings, type Mapped, type Times } from './build.js'
import { providerOfModel, providerSpelling } from './providers.js'
import { ItemRejected, AttributeView } from './view.js'

// GenAI semantic conventions (current names first, then the deprecated ones OpenLLMetry still sends).
const INPUT = ['gen_ai.usage.input_tokens', 'gen_ai.usage.prompt_tokens']
const OUTPUT = ['gen_ai.usage.output_tokens', 'gen_ai.usage.completion_tokens']
const CACHE_READ = ['gen_ai.usage.cache_read.input_tokens', 'gen_ai.usage.cache_read_input_tokens', 'gen_ai.usage.cache_read_tokens']
const CACHE_CREATION = ['gen_ai.usage.cache_creation.input_tokens', 'gen_ai.usage.cache_creation_input_tokens', 'gen_ai.usage.cache_creation_tokens']
const REASONING = ['gen_ai.usage.reasoning.output_tokens', 'gen_ai.usage.reasoning_tokens', 'gen_ai.usage.reasoning_output_tokens', 'llm.usage.reasoning_tokens']
const TOTAL = ['gen_ai.usage.total_tokens', 'llm.usage.total_tokens']
const PROVIDER = ['gen_ai.provider.name', 'gen_ai.system']
const MODEL = ['gen_ai.response.model', 'gen_ai.request.model']
/** Read by the GenAI mapping; also marked as mapped on Vercel AI SDK spans, which carry both. */
const GENAI_KEYS = [...INPUT, ...OUTPUT, ...CACHE_READ, ...CACHE_CREATION, ...REASONING, ...TOTAL, ...PROVIDER, ...MODEL, 'gen_ai.response.finish_reasons', 'gen_ai.response.id', 'gen_ai.operation.name']

/**
 * The span attributes that can make a span usage: mapSpan decides on `gen_ai.operation.name`,
 * `gen_ai.provider.name`/`gen_ai.system` with `gen_ai.usage.*`, `ai.operationId` and
 * `openinference.span.kind`, read on the span or its resource. A span with no attribute under
 * these prefixes, and a resource with none either, is never usage and never refused, so the
 * receiver need not decode it (Consumer.spanInterest). Keep this in step with the deciding keys.
 */
export const SPAN_USAGE_PREFIXES: readonly string[] = ['gen_ai.', 'ai.', 'openinference.', 'llm.']

const OPERATIONS: Record<string, string> = { chat: 'CHAT', text_completion: 'GENERATE', generate_content: 'CHAT', embeddings: 'EMBED' }
const LLM_REQUEST_TYPES: Record<string, string> = { chat: 'CHAT', completion: 'GENERATE', embedding: 'EMBED', rerank: 'RERANK' }

/** A span → a usage record's body, or undefined when the span is not usage (most spans). */
export function mapSpan(item: SpanItem, s: MapSettings): Mapped | undefined {
  const { span } = item
  const v = new AttributeView(item.resource.attributes, span.attributes)
  const op = v.name('gen_ai.operation.name')?.toLowerCase()
  if (op === 'execute_tool') return toolSpan(item, v, s)
  // Agent spans sum their children's usage; counting them too would count it twice.
  if (op === 'invoke_agent' || op === 'create_agent') return undefined
  // Each convention claims its spans: null = claimed, and not a provider call.
  let draft = vercel(v)
  if (draft === undefined) draft = openInference(v)
  if (draft === undefined) draft = genAi(v, op)
  if (!draft) return undefined

  const times = spanTimes(item)
  const error = spanError(item, v)
  if (error !== undefined) draft.error = error
  const body = completionBody(draft, times)
  body.transactionId = transactionId(v, ['ai.response.id'], () => `span:${span.traceId}:${span.spanId}`)
  body.traceId = span.traceId
  const agent = v.string('gen_ai.agent.name')
  if (agent !== undefined) body.agent = agent
  const session = v.string('gen_ai.conversation.id', 'session.id')
  if (session !== undefined) body.sessionId = session
  const temperature = v.value('gen_ai.request.temperature')
  if (typeof temperature === 'number') body.temperature = temperature
  return finishBody('completion', body, v, s)
}

/** A failed span's error: `error.type` and the status message, when the span says it failed. */
function spanError(item: SpanItem, v: AttributeView): string | undefined {
  const type = v.string('error.type')
  const { code, message } = item.span.status
  if (type === undefined && code !== 2) return undefined
  if (type !== undefined && message) return `${type}: ${message}`
  return type ?? (message || 'span status ERROR')
}

function spanTimes(item: SpanItem): Times {
  const { startTimeUnixNano, endTimeUnixNano } = item.span
  if (startTimeUnixNano === '0') throw new ItemRejected('startTimeUnixNano is required')
  const startMs = nanosToMs(startTimeUnixNano)
  const endMs = endTimeUnixNano === '0' ? startMs : nanosToMs(endTimeUnixNano)
  return { startMs, endMs }
}

function requireModel(model: string | undefined, keys: string): string {
  if (model === undefined || model.trim() === '') throw new ItemRejected(`${keys} is required on a usage span`)
  return model
}

function providerOf(raw: string | undefined, model: string): string {
  return raw !== undefined ? providerSpelling(raw) : (providerOfModel(model) ?? 'unknown')
}

/**
 * GenAI conventions (and OpenLLMetry, which uses them with the deprecated names): an inference
 * operation, or any span with a provider and usage. Cache tokens are counted inside input tokens.
 */
function genAi(v: AttributeView, op: string | undefined): CompletionDraft | undefined {
  const inference = op !== undefined && OPERATIONS[op] !== undefined
  if (!inference && !(v.hasAny(PROVIDER) && (v.hasAny(INPUT) || v.hasAny(OUTPUT)))) return undefined
  const model = requireModel(v.stringOf(MODEL), 'gen_ai.request.model')
  const requestType = v.string('llm.request.type')?.toLowerCase()
  return {
    model,
    provider: providerOf(v.stringOf(PROVIDER), model),
    usage: {
      input: v.countOf(INPUT),
      output: v.countOf(OUTPUT),
      cacheRead: v.countOf(CACHE_READ),
      cacheCreation: v.countOf(CACHE_CREATION),
      reasoning: v.countOf(REASONING),
      total: v.countOf(TOTAL),
    },
    counting: 'in-input',
    operationType: (op && OPERATIONS[op]) || (requestType && LLM_REQUEST_TYPES[requestType]) || 'CHAT',
    finishReason: v.string('gen_ai.response.finish_reasons'),
    streamed: v.bool('llm.is_streaming'),
  }
}

/** OpenInference (Arize/Phoenix): LLM and EMBEDDING spans; the prompt count includes cache tokens. */
function openInference(v: AttributeView): CompletionDraft | null | undefined {
  const kind = v.name('openinference.span.kind')?.toUpperCase()
  if (kind === undefined) return undefined
  if (kind !== 'LLM' && kind !== 'EMBEDDING') return null
  const model = requireModel(v.string('llm.model_name', 'embedding.model_name'), 'llm.model_name')
  v.consume(GENAI_KEYS)
  return {
    model,
    provider: providerOf(v.string('llm.provider', 'llm.system'), model),
    usage: {
      input: v.count('llm.token_count.prompt'),
      output: v.count('llm.token_count.completion'),
      cacheRead: v.count('llm.token_count.prompt_details.cache_read'),
      cacheCreation: v.count('llm.token_count.prompt_details.cache_write'),
      reasoning: v.count('llm.token_count.completion_details.reasoning'),
      total: v.count('llm.token_count.total'),
    },
    counting: 'in-input',
    operationType: kind === 'EMBEDDING' ? 'EMBED' : 'CHAT',
  }
}

/**
 * The Vercel AI SDK: only the provider calls (`ai.*.doGenerate`, `doStream`, `doEmbed`) count;
 * the outer `ai.generateText` … spans sum them. Before AI SDK 6 the counts are the provider's own
 * (Anthropic's input excludes cache); AI SDK 6 reports `inputTokenDetails`, input including cache.
 */
function vercel(v: AttributeView): CompletionDraft | null | undefined {
  const opId = v.name('ai.operationId')
  if (opId === undefined) return undefined
  if (!/\.(doGenerate|doStream|doEmbed)$/.test(opId)) return null
  const model = requireModel(v.string('ai.response.model', 'ai.model.id', ...MODEL), 'ai.model.id')
  v.consume(GENAI_KEYS)
  const v6 = v.has('ai.usage.inputTokenDetails.cacheReadTokens', 'ai.usage.inputTokenDetails.cacheWriteTokens', 'ai.usage.inputTokenDetails.noCacheTokens')
  // noCacheTokens is input minus the cache counts: the same usage, already counted.
  v.consume(['ai.usage.inputTokenDetails.noCacheTokens'])
  const ttft = v.amount('ai.response.msToFirstChunk')
  return {
    model,
    provider: providerOf(v.string('ai.model.provider', ...PROVIDER), model),
    usage: {
      input: v.count('ai.usage.inputTokens', 'ai.usage.promptTokens', 'ai.usage.tokens'),
      output: v.count('ai.usage.outputTokens', 'ai.usage.completionTokens'),
      cacheRead: v6 ? v.count('ai.usage.inputTokenDetails.cacheReadTokens') : v.count('ai.usage.cachedInputTokens'),
      cacheCreation: v6 ? v.count('ai.usage.inputTokenDetails.cacheWriteTokens') : undefined,
      reasoning: v.count('ai.usage.reasoningTokens', 'ai.usage.outputTokenDetails.reasoningTokens'),
      total: v.count('ai.usage.totalTokens'),
    },
    counting: v6 ? 'in-input' : 'native',
    operationType: opId.endsWith('.doEmbed') ? 'EMBED' : 'CHAT',
    finishReason: v.string('ai.response.finishReason', 'gen_ai.response.finish_reasons'),
    streamed: opId.endsWith('.doStream'),
    timeToFirstTokenMs: ttft,
  }
}

/** An `execute_tool` span of a registered tool → a tool event (priced by the tool registry). */
function toolSpan(item: SpanItem, v: AttributeView, s: MapSettings): Mapped | undefined {
  const toolId = v.string('gen_ai.tool.name')
  if (toolId === undefined || !s.isRegisteredTool(toolId)) return undefined
  const { span } = item
  const times = spanTimes(item)
  if (!(times.endMs >= times.startMs)) throw new ItemRejected('the end time is before the start time')
  const error = spanError(item, v)
  const body: Record<string, unknown> = {
    toolId,
    timestamp: iso(times.startMs),
    durationMs: Math.round(times.endMs - times.startMs),
    success: error === undefined,
    transactionId: transactionId(v, ['gen_ai.tool.call.id'], () => `span:${span.traceId}:${span.spanId}`),
    traceId: span.traceId,
  }
  if (error !== undefined) body.errorMessage = error
  const agent = v.string('gen_ai.agent.name')
  if (agent !== undefined) body.agent = agent
  return finishBody('tool', body, v, s)
}
