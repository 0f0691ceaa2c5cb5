import type { LogItem } from '../../model/otlp.js'
import { completionBody, finishBody, iso, nanosToMs, transactionId, type CompletionDraft, type MapSettings, type Mapped } from './build.js'
import { providerOfModel } from './providers.js'
import { ItemRejected, AttributeView } from './view.js'

/*
 * Log records of the coding assistants (wire-contract §4.3) → usage records. Which record is
 * usage is decided by its event name: the record's event_name, else its `event.name` attribute,
 * else its string body.
 */

/** A log record → a usage record's body, or undefined when it is not usage. */
export function mapLog(item: LogItem, s: MapSettings, receivedMs: number): Mapped | undefined {
  const v = new AttributeView(item.resource.attributes, item.log.attributes)
  const event = eventName(item, v)
  switch (event) {
    case 'tool.call':
      return toolCall(item, v, s, event, receivedMs)
    case 'claude_code.api_request':
      return completion(item, v, s, event, receivedMs, anthropicStyle(v, 'Anthropic'))
    case 'gemini_cli.api_response':
      return completion(item, v, s, event, receivedMs, gemini(v))
    case 'codex.sse_event':
      // Codex streams every server-sent event; the usage is on the one that completes the response.
      if (v.name('event.kind') !== 'response.completed') return undefined
      return completion(item, v, s, event, receivedMs, codex(v))
    case 'cursor_ide.api_response':
      return completion(item, v, s, event, receivedMs, anthropicStyle(v, undefined))
    // The GenAI event for an inference repeats the usage of its span (or, from Gemini CLI, of its
    // gemini_cli.api_response record): counting it would count the response twice.
    case 'gen_ai.client.inference.operation.details':
      return undefined
  }
  // The vendor setup tools' connectivity check: `<service-name>.api_request` (hyphenated, unlike
  // Gemini CLI's own gemini_cli.api_request, which carries no usage), with Claude Code's attributes.
  if (HEALTH_CHECK.test(event)) {
    const service = event.slice(0, event.indexOf('.'))
    return completion(item, v, s, event, receivedMs, anthropicStyle(v, SERVICE_PROVIDERS[service]))
  }
  return undefined
}

const HEALTH_CHECK = /^[a-z0-9]+(?:-[a-z0-9]+)+\.api_request$/
const SERVICE_PROVIDERS: Record<string, string> = { 'claude-code': 'Anthropic', 'gemini-cli': 'Google', 'codex-cli': 'OpenAI' }

function eventName(item: LogItem, v: AttributeView): string {
  const { log } = item
  const body = typeof log.body === 'string' ? log.body : ''
  let name = log.eventName || v.name('event.name') || body
  // Claude Code sends event.name=api_request with the body claude_code.api_request.
  if (name !== body && !name.includes('.') && body.endsWith('.' + name)) name = body
  if (name === 'api_request' && isClaudeCode(item)) name = 'claude_code.api_request'
  return name
}

function isClaudeCode(item: LogItem): boolean {
  return item.resource.attributes['service.name'] === 'claude-code' || item.scope.name.startsWith('com.anthropic.claude_code')
}

/**
 * Claude Code's attributes (also Cursor's, through the vendor CLI, and the connectivity check):
 * input_tokens excludes cache reads and writes, which come apart.
 */
function anthropicStyle(v: AttributeView, provider: string | undefined): CompletionDraft {
  const model = requireModel(v)
  return {
    model,
    provider: providerOfModel(model) ?? provider ?? 'unknown',
    usage: {
      input: v.count('input_tokens'),
      output: v.count('output_tokens'),
      cacheRead: v.count('cache_read_tokens'),
      cacheCreation: v.count('cache_creation_tokens'),
    },
    counting: 'beside-input',
    operationType: 'CHAT',
  }
}

/**
 * Gemini CLI (the Gemini API's usage metadata): input_token_count includes the cached tokens;
 * thoughts are billed as output but counted apart from output_token_count, and tool-use prompt
 * tokens apart from input, so both are added in (the REST meaning: reasoning is part of output).
 */
function gemini(v: AttributeView): CompletionDraft {
  const model = requireModel(v)
  const input = v.count('input_token_count')
  const toolPrompt = v.count('tool_token_count')
  const output = v.count('output_token_count')
  const thoughts = v.count('thoughts_token_count')
  const status = v.string('status_code')
  const error = v.string('error') ?? (status !== undefined && Number(status) >= 400 ? `status ${status}` : undefined)
  return {
    model,
    provider: 'Google',
    usage: {
      input: input === undefined && toolPrompt === undefined ? undefined : (input ?? 0) + (toolPrompt ?? 0),
      output: output === undefined && thoughts === undefined ? undefined : (output ?? 0) + (thoughts ?? 0),
      cacheRead: v.count('cached_content_token_count'),
      reasoning: thoughts,
      total: v.count('total_token_count'),
    },
    counting: 'in-input',
    operationType: 'CHAT',
    error,
  }
}

/**
 * Codex (OpenAI Responses usage): input includes the cached tokens, output includes reasoning.
 * Its tool_token_count is a running total of input + output, not a count of its own: not read.
 */
function codex(v: AttributeView): CompletionDraft {
  const model = requireModel(v)
  v.consume(['tool_token_count', 'event.kind'])
  return {
    model,
    provider: providerOfModel(model) ?? 'OpenAI',
    usage: {
      input: v.count('input_token_count'),
      output: v.count('output_token_count'),
      cacheRead: v.count('cached_token_count'),
      reasoning: v.count('reasoning_token_count'),
    },
    counting: 'in-input',
    operationType: 'CHAT',
    streamed: true,
  }
}

function requireModel(v: AttributeView): string {
  const model = v.string('model')
  if (model === undefined || model.trim() === '') throw new ItemRejected('model is required on a usage record')
  return model
}

/** When the record happened: its time, else when it was observed, else its event.timestamp, else now. */
function recordTime(item: LogItem, v: AttributeView, receivedMs: number): number {
  const { timeUnixNano, observedTimeUnixNano } = item.log
  if (timeUnixNano !== '0') return nanosToMs(timeUnixNano)
  if (observedTimeUnixNano !== '0') return nanosToMs(observedTimeUnixNano)
  const stamp = v.string('event.timestamp')
  const ms = stamp === undefined ? NaN : Date.parse(stamp)
  return Number.isNaN(ms) ? receivedMs : ms
}

/** The stable identity of a log record, for its transactionId when it carries none. */
function identity(item: LogItem, event: string): string {
  const { log } = item
  return 'log:' + JSON.stringify([log.timeUnixNano, event, log.body, log.attributes, log.traceId, log.spanId])
}

/**
 * A usage log record → a completion: the record's time is when the response ended, duration_ms
 * before it is when the request started. The session (session.id, Codex's conversation.id) is
 * the record's trace unless the record carries a trace id.
 */
function completion(item: LogItem, v: AttributeView, s: MapSettings, event: string, receivedMs: number, draft: CompletionDraft): Mapped {
  const endMs = recordTime(item, v, receivedMs)
  const duration = v.amount('duration_ms') ?? 0
  const body = completionBody(draft, { startMs: endMs - duration, endMs })
  body.transactionId = transactionId(v, [], () => identity(item, event))
  const session = v.string('session.id', 'conversation.id', 'gen_ai.conversation.id')
  if (session !== undefined) body.sessionId = session
  const traceId = item.log.traceId || session
  if (traceId) body.traceId = traceId
  return finishBody('completion', body, v, s)
}

/** A `tool.call` record (vendor CLI backfill) → a tool event. */
function toolCall(item: LogItem, v: AttributeView, s: MapSettings, event: string, receivedMs: number): Mapped {
  const toolId = v.string('tool.id', 'tool.name', 'gen_ai.tool.name')
  if (toolId === undefined) throw new ItemRejected('tool.id is required on a tool.call record')
  const body: Record<string, unknown> = {
    toolId,
    timestamp: iso(recordTime(item, v, receivedMs)),
    transactionId: transactionId(v, [], () => identity(item, event)),
  }
  const success = v.bool('success')
  if (success !== undefined) body.success = success
  const duration = v.amount('duration_ms')
  if (duration !== undefined) body.durationMs = duration
  const error = v.string('error.message')
  if (error !== undefined) body.errorMessage = error
  const source = v.string('middleware.source')
  if (source !== undefined) body.middlewareSource = source
  const session = v.string('session.id')
  if (session !== undefined) body.sessionId = session
  const traceId = item.log.traceId || session
  if (traceId) body.traceId = traceId
  return finishBody('tool', body, v, s)
}
