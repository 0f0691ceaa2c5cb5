/**
 * Provider names as OTLP senders spell them (GenAI `gen_ai.provider.name` and the deprecated
 * `gen_ai.system`, OpenInference `llm.provider`/`llm.system`, the Vercel AI SDK's
 * `ai.model.provider`) → the REST spelling clients send (wire-contract §1.2), which the price
 * book matches case-insensitively through its aliases.
 */
const SPELLINGS: Record<string, string> = {
  openai: 'OpenAI',
  'azure.ai.openai': 'Azure',
  'az.ai.openai': 'Azure',
  'azure-openai': 'Azure',
  azure_openai: 'Azure',
  azure: 'Azure',
  'azure.ai.inference': 'Azure',
  'az.ai.inference': 'Azure',
  anthropic: 'Anthropic',
  claude: 'Anthropic',
  'aws.bedrock': 'Amazon Bedrock',
  'amazon-bedrock': 'Amazon Bedrock',
  amazon_bedrock: 'Amazon Bedrock',
  bedrock: 'Amazon Bedrock',
  aws: 'Amazon Bedrock',
  'gcp.gemini': 'Google',
  'gcp.gen_ai': 'Google',
  'gcp.vertex_ai': 'Google',
  vertex_ai: 'Google',
  vertexai: 'Google',
  vertex: 'Google',
  gemini: 'Google',
  google: 'Google',
  'google.generative-ai': 'Google',
  'google.vertex': 'Google',
  cohere: 'Cohere',
  deepseek: 'DeepSeek',
  groq: 'Groq',
  mistral_ai: 'Mistral',
  mistralai: 'Mistral',
  mistral: 'Mistral',
  perplexity: 'Perplexity',
  x_ai: 'xAI',
  xai: 'xAI',
  together: 'Together',
  together_ai: 'Together',
  togetherai: 'Together',
  fireworks: 'Fireworks',
  fireworks_ai: 'Fireworks',
  'ibm.watsonx.ai': 'IBM watsonx',
}

/** The REST spelling of a provider name; unknown names are kept as sent. */
export function providerSpelling(raw: string): string {
  const k = raw.trim().toLowerCase()
  const known = SPELLINGS[k]
  if (known) return known
  // The Vercel AI SDK names the provider and its API: openai.chat, anthropic.messages,
  // vertex.anthropic.messages (Claude on Vertex is Anthropic's model and counts).
  if (k.includes('anthropic')) return 'Anthropic'
  const dot = k.indexOf('.')
  if (dot > 0) {
    const head = SPELLINGS[k.slice(0, dot)]
    if (head) return head
  }
  return raw.trim()
}

/** A provider guessed from a model name, for senders that name only the model (Cursor, some spans). */
export function providerOfModel(model: string): string | undefined {
  const m = model.toLowerCase()
  if (m.includes('claude')) return 'Anthropic'
  if (/^(gpt|o\d|chatgpt|text-embedding|davinci|babbage|codex|computer-use)/.test(m)) return 'OpenAI'
  if (/gemini|gemma/.test(m)) return 'Google'
  if (/^(mistral|mixtral|codestral|magistral|ministral|pixtral|devstral)/.test(m)) return 'Mistral'
  if (m.startsWith('grok')) return 'xAI'
  if (m.startsWith('deepseek')) return 'DeepSeek'
  if (m.startsWith('command')) return 'Cohere'
  if (/(^|\.)(nova|titan)-/.test(m)) return 'Amazon Bedrock'
  return undefined
}

const KNOWN = new Set(Object.values(SPELLINGS))

/**
 * Whether meterd's REST meaning of inputTokenCount leaves cache tokens out for this provider and
 * model (wire-contract §1.5, docs/pricing.md): Anthropic-style counts, as the price book's
 * `cached_in_input: false` sections (anthropic, amazon) say. Claude models are priced from the
 * Anthropic section (or Bedrock's, also cache-exclusive) whoever serves them; for a provider
 * the book does not know, the model's maker decides, as the book's lookup does. A test holds
 * this rule equal to config/prices.yaml for every model with a cache price.
 */
export function cacheOutsideInput(provider: string, model: string): boolean {
  if (model.toLowerCase().includes('claude')) return true
  let p = providerSpelling(provider)
  // A gateway or an unnamed provider: the price book finds the model in its maker's section.
  if (!KNOWN.has(p)) p = providerOfModel(model) ?? p
  return p === 'Anthropic' || p === 'Amazon Bedrock'
}
