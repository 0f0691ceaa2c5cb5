// The genai connector as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type, type Static } from '@sinclair/typebox'
import type { Descriptor, ConnectorFactory } from '../../host/component.js'

/** Prompt and response content: large, often personal, and not what metering is for. */
export const CONTENT_ATTRIBUTES = [
  'gen_ai.input.messages', 'gen_ai.output.messages', 'gen_ai.system_instructions', 'gen_ai.tool.definitions',
  'gen_ai.prompt', 'gen_ai.completion', 'gen_ai.tool.call.arguments', 'gen_ai.tool.call.result',
  'llm.input_messages', 'llm.output_messages', 'llm.prompts', 'llm.prompt_template', 'llm.tools', 'llm.invocation_parameters',
  'input.value', 'output.value', 'embedding.embeddings',
  'ai.prompt', 'ai.response.text', 'ai.response.object', 'ai.response.toolCalls', 'ai.response.reasoning',
  'ai.toolCall.args', 'ai.toolCall.result', 'ai.values', 'ai.value', 'ai.embeddings', 'ai.embedding', 'ai.schema',
  'traceloop.entity.input', 'traceloop.entity.output',
  'prompt', 'request_text', 'response_text', 'tool_parameters', 'tool_input', 'tool_output',
]

const schema = Type.Object(
  {
    attribute_prefixes: Type.Array(Type.String({ minLength: 1 }), {
      default: ['service.', 'revenium.'],
      description: 'Prefixes of the attribution attributes (`<prefix>organization.name`, …), in order of precedence; `<prefix>api_key` (and always `service.api_key`, `revenium.api_key`) is never stored',
    }),
    dedup_window_hours: Type.Number({
      default: 24,
      minimum: 0,
      maximum: 840,
      description: "How long a record's transactionId is remembered per team, across OTLP and REST, so a retried export is stored once (up to 35 days)",
    }),
    drop_attributes: Type.Array(Type.String({ minLength: 1 }), {
      default: CONTENT_ATTRIBUTES,
      description: 'Attributes not kept on a record (each name also drops the names below it, `name.*`); by default prompt and response content',
    }),
  },
  { additionalProperties: false },
)
export type Config = Static<typeof schema>

export const genaiDescriptor: Descriptor<ConnectorFactory<typeof schema>> = {
  kind: 'connector',
  type: 'genai',
  description: 'GenAI spans and coding-assistant logs → usage records (traces and logs pipelines into usage pipelines)',
  connects: [
    ['traces', 'usage'],
    ['logs', 'usage'],
  ],
  schema,
}
