import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { parse } from 'yaml'
import { Decimal, dec } from '../../src/domain/pricing/money.js'
import { PACKAGE_ROOT } from '../../src/core/paths.js'

/**
 * The price book cross-checked against an independent list (LiteLLM's, see
 * test/fixtures/pricing/README.md): every field both have must agree exactly, or our entry must
 * say where its price was read and when (`source:`, page and date checked).
 */

type Num = number | string
type Entry = Record<string, unknown> & { aliases?: string[]; source?: string; long_context?: Record<string, Num> }
type Book = { providers: Record<string, { models: Record<string, Entry> }> }
type RefEntry = Record<string, unknown> & { litellm_provider: string }

const load = (file: string) => parse(readFileSync(join(PACKAGE_ROOT, 'config', file), 'utf8')) as Book
const reference = JSON.parse(readFileSync(join(PACKAGE_ROOT, 'test/fixtures/pricing/litellm-prices.json'), 'utf8')) as Record<string, RefEntry>

/** Our provider key → LiteLLM's providers for the same host. */
const HOSTS: Record<string, string[]> = {
  openai: ['openai', 'text-completion-openai'],
  anthropic: ['anthropic'],
  google: ['gemini', 'vertex_ai-language-models', 'vertex_ai-embedding-models'],
  mistral: ['mistral'],
  deepseek: ['deepseek'],
  xai: ['xai'],
  cohere: ['cohere', 'cohere_chat'],
  amazon: ['bedrock', 'bedrock_converse'],
  together: ['together_ai'],
  groq: ['groq'],
  fireworks: ['fireworks_ai'],
  perplexity: ['perplexity'],
}

/**
 * A reference id as the model's bare name: host paths (`groq/openai/`, `bedrock/us-east-1/`,
 * `fireworks_ai/accounts/fireworks/models/`), Bedrock's region and vendor prefixes and its `-v1:0`.
 * Undefined for ids that price one image size (`1024-x-1024/dall-e-2`) or a region other than the
 * list price's (`bedrock/eu-west-1/…`, `eu.meta.…`): they are not the model's list price.
 */
function bareName(id: string): string | undefined {
  const parts = id.toLowerCase().split('/')
  if (parts.some((p) => /^\d+-x-\d+$|^(hd|standard|low|medium|high)$|-steps$/.test(p))) return undefined
  if (parts.some((p) => /^[a-z]{2}(-gov)?-[a-z]+-\d$/.test(p) && p !== 'us-east-1')) return undefined
  let name = parts[parts.length - 1]
  if (/^(eu|apac|jp|au|ca|us-gov)\./.test(name)) return undefined
  name = name.replace(/^(us|global)\./, '')
  const vendor = /^(anthropic|meta|mistral|cohere|amazon|deepseek|ai21|openai|writer|qwen)\./
  // Bedrock's own version suffix, on Bedrock's vendor-prefixed ids only (whisper-large-v3 keeps its v3).
  return vendor.test(name) ? name.replace(vendor, '').replace(/-v\d+(:\d+)?$/, '') : name
}

const PER_MILLION = new Decimal(1_000_000)
const times = (v: unknown, k: number | Decimal) => (typeof v === 'number' ? dec(v).times(k) : undefined)

/** Token prices per million: our YAML field → the reference's per-token field. */
const TOKEN_FIELDS: [ours: string, theirs: string][] = [
  ['input', 'input_cost_per_token'],
  ['output', 'output_cost_per_token'],
  ['cache_read', 'cache_read_input_token_cost'],
  ['cache_write_5m', 'cache_creation_input_token_cost'],
  ['cache_write_1h', 'cache_creation_input_token_cost_above_1hr'],
  ['reasoning', 'output_cost_per_reasoning_token'],
]
const LONG_FIELDS: [ours: string, theirs: string][] = [
  ['input', 'input_cost_per_token_above_K_tokens'],
  ['output', 'output_cost_per_token_above_K_tokens'],
  ['cache_read', 'cache_read_input_token_cost_above_K_tokens'],
  ['cache_write_5m', 'cache_creation_input_token_cost_above_K_tokens'],
]

interface Field {
  field: string
  /** What the book charges (for a cache or reasoning rate it does not spell out, see `charged`). */
  ours: Decimal
  theirs: Decimal
}

/**
 * The rate the book charges for a field: a missing cache rate is the input rate, a missing
 * reasoning rate the output rate (docs/pricing.md), so the reference's cache or reasoning rate is
 * compared with what we would charge, not only with the rates we spell out.
 */
function charged(e: Entry, field: string): Decimal {
  const v = (f: string) => (e[f] === undefined ? undefined : dec(e[f] as Num))
  const input = v('input')!
  switch (field) {
    case 'cache_read':
      return v('cache_read') ?? input
    case 'cache_write_5m':
      return v('cache_write_5m') ?? input
    case 'cache_write_1h':
      return v('cache_write_1h') ?? v('cache_write_5m') ?? input
    case 'reasoning':
      return v('reasoning') ?? v('output')!
    default:
      return v(field)!
  }
}

/** The fields of a token price both lists have, in our unit (USD per million tokens). */
function tokenFields(e: Entry, r: RefEntry): Field[] {
  const out: Field[] = []
  for (const [ours, theirs] of TOKEN_FIELDS) {
    const v = times(r[theirs], PER_MILLION)
    // A zero the reference gives for a rate we do not spell out means "not billed apart" (DeepSeek's cache writes).
    if (v && (e[ours] !== undefined || !v.isZero())) out.push({ field: ours, ours: charged(e, ours), theirs: v })
  }
  const lc = e.long_context
  if (lc && (lc.threshold === 200000 || lc.threshold === 128000)) {
    const k = lc.threshold === 200000 ? '200k' : '128k'
    for (const [ours, theirs] of LONG_FIELDS) {
      const v = times(r[theirs.replace('K', k)], PER_MILLION)
      if (v && lc[ours] !== undefined) out.push({ field: `long_context.${ours}`, ours: dec(lc[ours]), theirs: v })
    }
  }
  return out
}

/** The fields of a media price both lists have, in our unit (per image, per million characters, per second/minute/hour). */
function mediaFields(e: Entry, r: RefEntry): Field[] {
  const out: Field[] = []
  const add = (field: string, theirs: Decimal | undefined) => {
    if (theirs && e[field] !== undefined) out.push({ field, ours: dec(e[field] as Num), theirs })
  }
  add('per_image', times(r.output_cost_per_image ?? r.input_cost_per_image, 1))
  add('per_million_characters', times(r.input_cost_per_character, PER_MILLION))
  const perSecond = r.input_cost_per_second ?? r.output_cost_per_second ?? r.output_cost_per_video_per_second
  add('per_second', times(perSecond, 1))
  add('per_minute', times(perSecond, 60))
  add('per_hour', times(perSecond, 3600))
  return out
}

interface Difference extends Field {
  book: string
  provider: string
  model: string
  refId: string
  source?: string
}

/** Every field of every model both lists have, with whether it agrees. */
function crossCheck(file: string, fields: (e: Entry, r: RefEntry) => Field[]) {
  const book = load(file)
  const compared = new Set<string>()
  const diffs: Difference[] = []
  let fieldCount = 0
  for (const [provider, p] of Object.entries(book.providers)) {
    const hosts = HOSTS[provider]
    if (!hosts) continue
    for (const [model, e] of Object.entries(p.models)) {
      const names = new Set([model, ...(e.aliases ?? [])].map((s) => s.toLowerCase()))
      for (const [id, r] of Object.entries(reference)) {
        if (!hosts.includes(r.litellm_provider)) continue
        const name = bareName(id)
        if (!name || !names.has(name)) continue
        for (const f of fields(e, r)) {
          compared.add(`${provider}/${model}`)
          fieldCount++
          if (!f.ours.equals(f.theirs)) diffs.push({ ...f, book: file, provider, model, refId: id, source: e.source })
        }
      }
    }
  }
  return { compared, diffs, fieldCount }
}

const tokens = crossCheck('prices.yaml', tokenFields)
const media = crossCheck('media-prices.yaml', mediaFields)

/** A source names a page (an address such as fireworks.ai/pricing) and the date it was checked. */
const PAGE = /\b[a-z0-9-]+(\.[a-z0-9-]+)*\.(com|ai|dev|io|org|net|sh|cloud)\b/i
const DATE = /\b20\d\d-\d\d-\d\d\b/
const sourced = (s: unknown) => typeof s === 'string' && PAGE.test(s) && DATE.test(s)

const describe = (d: Difference) => `${d.book} ${d.provider}/${d.model} ${d.field}: ours ${d.ours}, reference ${d.theirs} (${d.refId})`

t.test('every price both lists have agrees with the reference, or our entry says where it was read', async (t) => {
  // The matching itself must work, or the check passes by comparing nothing.
  t.ok(tokens.compared.size >= 100, `${tokens.compared.size} token-priced models compared`)
  t.ok(media.compared.size >= 15, `${media.compared.size} media models compared`)
  t.ok(tokens.fieldCount + media.fieldCount >= 250, `${tokens.fieldCount + media.fieldCount} fields compared`)
  for (const d of [...tokens.diffs, ...media.diffs]) {
    t.ok(sourced(d.source), `${describe(d)} differs: the entry needs source: (page and date checked)`)
  }
})

t.test('every source names a page and the date it was checked', async (t) => {
  for (const file of ['prices.yaml', 'media-prices.yaml']) {
    for (const [provider, p] of Object.entries(load(file).providers))
      for (const [model, e] of Object.entries(p.models))
        if (e.source !== undefined) t.ok(sourced(e.source), `${file} ${provider}/${model}: ${e.source}`)
  }
})

// PRICES_REPORT=1 lists every difference, sourced or not (docs/pricing.md, "Where the prices come from").
if (process.env.PRICES_REPORT) {
  for (const d of [...tokens.diffs, ...media.diffs]) console.error(`${describe(d)}${d.source ? ' [sourced]' : ''}`)
  const models = new Set([...tokens.diffs, ...media.diffs].map((d) => d.provider + '/' + d.model))
  const fields = new Set([...tokens.diffs, ...media.diffs].map((d) => `${d.provider}/${d.model} ${d.field}`))
  console.error(`${fields.size} fields of ${models.size} models differ; compared ${tokens.compared.size} + ${media.compared.size} models`)
}
