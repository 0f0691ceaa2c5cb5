import type { CompletionBody, Cost } from '../../model/usage-record.js'
import { readBookFile } from './book-file.js'
import { Decimal, ZERO, dec, money, moneyOfUnits, priceTooLarge, type Scaled, perMillion, perTokenScaled, plusScaled, round, roundScaled, timesScaled, type Decimal as D } from './money.js'

/** Per-million-token prices of one model (YAML spelling in comments). */
export interface Rates {
  input: D
  output: D
  cacheRead?: D // cache_read
  cacheWrite5m?: D // cache_write_5m
  cacheWrite1h?: D // cache_write_1h
  /** Only when the provider bills reasoning apart from output; else reasoning is output. */
  reasoning?: D
}

export interface ModelPrice extends Rates {
  provider: string
  model: string
  effective: string
  /** Above `threshold` prompt tokens, every token of the request is priced at these rates. */
  longContext?: { threshold: number } & Partial<Rates>
  /** Where the price was read and when (page address and date checked), as the book's entry says. */
  source?: string
  /** `pricebook` (config/prices.yaml) or `config` (an operator's override). */
  origin: 'pricebook' | 'config'
  /** Stored on every record priced with it: a later price change never rewrites history. */
  version: string
}

export interface ProviderInfo {
  key: string
  aliases: string[]
  /** OpenAI-style: inputTokenCount includes cached tokens (wire-contract §1.5). */
  cachedInInput: boolean
  /** Providers whose models this host also serves at their list price (Bedrock → Anthropic…). */
  fallback: string[]
  /** Multiplier for `pricingTier: BATCH` requests. */
  batchMultiplier?: D
}

/** A model entry as written in YAML (prices are numbers or decimal strings, per million tokens). */
export interface ModelEntryYaml {
  effective: string
  input: number | string
  output: number | string
  cache_read?: number | string
  cache_write_5m?: number | string
  cache_write_1h?: number | string
  reasoning?: number | string
  aliases?: string[]
  /** Where the price was read and when (page address and date checked); kept with the entry, never used to price. */
  source?: string
  long_context?: { threshold: number; input?: number | string; output?: number | string; cache_read?: number | string; cache_write_5m?: number | string; cache_write_1h?: number | string }
}

export interface PriceBookYaml {
  version: string
  currency?: string
  providers: Record<
    string,
    { aliases?: string[]; cached_in_input?: boolean; fallback?: string[]; batch_multiplier?: number | string; models: Record<string, ModelEntryYaml> }
  >
}

/** An operator's override or addition (processor config `models`). */
export interface ModelOverride extends ModelEntryYaml {
  provider: string
  model: string
}

const RATE_FIELDS = ['input', 'output', 'cache_read', 'cache_write_5m', 'cache_write_1h', 'reasoning'] as const

/** The rates of an entry (its long_context's too) past MAX_PRICE, as [field, why]: the book and the overrides share the bound of tool prices. */
export function ratesTooLarge(e: Partial<ModelEntryYaml>): [string, string][] {
  const out: [string, string][] = []
  const scan = (r: Partial<Record<(typeof RATE_FIELDS)[number], number | string>>, prefix: string) => {
    for (const f of RATE_FIELDS) {
      const v = r[f]
      const why = v === undefined || v === null ? undefined : priceTooLarge(dec(v))
      if (why) out.push([prefix + f, why])
    }
  }
  scan(e, '')
  if (e.long_context) scan(e.long_context, 'long_context.')
  return out
}

const opt = (v: number | string | undefined): D | undefined => (v === undefined || v === null ? undefined : dec(v))

function rates(e: Partial<ModelEntryYaml>): Partial<Rates> {
  const r: Partial<Rates> = {}
  if (e.input !== undefined) r.input = dec(e.input)
  if (e.output !== undefined) r.output = dec(e.output)
  if (e.cache_read !== undefined) r.cacheRead = opt(e.cache_read)
  if (e.cache_write_5m !== undefined) r.cacheWrite5m = opt(e.cache_write_5m)
  if (e.cache_write_1h !== undefined) r.cacheWrite1h = opt(e.cache_write_1h)
  if (e.reasoning !== undefined) r.reasoning = opt(e.reasoning)
  return r
}

// Prefixes a host puts before a model name: `openai/gpt-4o`, `models/gemini-2.0-flash`,
// Bedrock's `us.anthropic.claude-…` and `meta.llama3-…`.
const REGION = /^(us|eu|apac|global|us-gov|jp|au|ca)\./
const VENDOR = /^(anthropic|meta|mistral|cohere|amazon|deepseek|ai21|openai|writer|qwen|xai|google)\./
// Dated or versioned suffixes, stripped one at a time: gpt-4o-2024-08-06, claude-…-20250514,
// claude-…@20240620, gemini-1.5-pro-002, mistral-large-2411, …-v1:0, -latest, -preview-05-20,
// -10-2025.
// The first rule that matches is applied, so a month-year date (-10-2025) goes before -preview…,
// whose optional digits would otherwise take the date and the word `preview` with it
// (gemini-2.5-computer-use-preview-10-2025 → gemini-2.5-computer-use-preview, not …-computer-use).
const SUFFIXES = [/:\d+$/, /-v\d+$/, /@[\w.-]+$/, /-\d{4}-\d{2}-\d{2}$/, /-\d{8}$/, /-\d{2}-\d{4}$/, /-latest$/, /-preview(-[\d-]+)?$/, /-exp(-[\d-]+)?$/, /-\d{3,4}$/]

/** Names to try for a model, most specific first. */
export function modelCandidates(model: string): string[] {
  let m = model.trim().toLowerCase()
  const out = [m]
  const push = (s: string) => {
    if (s && s !== m) {
      m = s
      out.push(s)
    }
  }
  if (m.includes('/')) push(m.slice(m.lastIndexOf('/') + 1))
  push(m.replace(REGION, '').replace(VENDOR, ''))
  for (let guard = 0; guard < 8; guard++) {
    const re = SUFFIXES.find((r) => r.test(m))
    if (!re) break
    push(m.replace(re, ''))
  }
  return out
}

const norm = (s: string) => s.trim().toLowerCase()

/**
 * The model price book (DESIGN §6): config/prices.yaml plus the operator's overrides,
 * matched by provider (case-insensitive, with aliases) and model (aliases, host prefixes,
 * dated suffixes). Lookups are cached; the book itself never changes while it runs.
 */
export class PriceBook {
  readonly version: string
  private readonly providers = new Map<string, ProviderInfo>()
  private readonly providerAlias = new Map<string, string>()
  /** provider key → model name or alias → price. */
  private readonly models = new Map<string, Map<string, ModelPrice>>()
  private readonly cache = new Map<string, { price: ModelPrice; provider: ProviderInfo } | null>()

  constructor(book: PriceBookYaml, overrides: ModelOverride[] = []) {
    this.version = String(book.version)
    for (const [key, p] of Object.entries(book.providers ?? {})) {
      const k = norm(key)
      const info: ProviderInfo = {
        key: k,
        aliases: (p.aliases ?? []).map(norm),
        cachedInInput: p.cached_in_input ?? true,
        fallback: (p.fallback ?? []).map(norm),
        batchMultiplier: opt(p.batch_multiplier),
      }
      this.providers.set(k, info)
      this.providerAlias.set(k, k)
      for (const a of info.aliases) this.providerAlias.set(a, k)
      for (const [model, e] of Object.entries(p.models ?? {})) this.add(k, model, e, 'pricebook')
    }
    for (const o of overrides) {
      const k = this.providerAlias.get(norm(o.provider)) ?? norm(o.provider)
      if (!this.providers.has(k)) {
        const info: ProviderInfo = { key: k, aliases: [], cachedInInput: true, fallback: [] }
        this.providers.set(k, info)
        this.providerAlias.set(k, k)
      }
      // An override is matched like the book's entry it replaces, so it inherits its aliases.
      const base = this.models.get(k)?.get(norm(o.model))
      const merged: ModelEntryYaml = { ...o, aliases: [...(o.aliases ?? [])] }
      if (base) this.remove(k, base.model)
      this.add(k, o.model, merged, 'config', base)
    }
  }

  static load(path: string, overrides: ModelOverride[] = []): PriceBook {
    const book = readBookFile(path) as PriceBookYaml
    if (!book || typeof book !== 'object' || !book.providers) throw new Error(`${path}: not a price book (no providers)`)
    return new PriceBook(book, overrides)
  }

  get size(): number {
    let n = 0
    for (const m of this.models.values()) n += new Set(m.values()).size
    return n
  }

  private add(provider: string, model: string, e: ModelEntryYaml, origin: ModelPrice['origin'], base?: ModelPrice): void {
    const name = norm(model)
    const [tooLarge] = ratesTooLarge(e)
    if (tooLarge) throw new Error(`${provider}/${model}: ${tooLarge[0]} ${tooLarge[1]} per million tokens`)
    const r = rates(e)
    const lc = e.long_context
    const price: ModelPrice = {
      provider,
      model: name,
      effective: String(e.effective ?? ''),
      input: r.input ?? ZERO,
      output: r.output ?? ZERO,
      cacheRead: r.cacheRead,
      cacheWrite5m: r.cacheWrite5m,
      cacheWrite1h: r.cacheWrite1h,
      reasoning: r.reasoning,
      source: typeof e.source === 'string' ? e.source : undefined,
      longContext: lc ? { threshold: Number(lc.threshold), ...rates(lc as Partial<ModelEntryYaml>) } : undefined,
      origin,
      version: origin === 'pricebook' ? `pricebook:${this.version}:${provider}/${name}@${e.effective}` : `config:${provider}/${name}@${e.effective}`,
    }
    let map = this.models.get(provider)
    if (!map) this.models.set(provider, (map = new Map()))
    map.set(name, price)
    for (const a of [...(e.aliases ?? []), ...(base ? this.aliasesOf(provider, base) : [])]) map.set(norm(a), price)
  }

  private aliasesOf(provider: string, p: ModelPrice): string[] {
    const out: string[] = []
    for (const [k, v] of this.models.get(provider) ?? []) if (v === p && k !== p.model) out.push(k)
    return out
  }

  private remove(provider: string, model: string): void {
    const map = this.models.get(provider)
    const p = map?.get(model)
    if (!map || !p) return
    for (const [k, v] of [...map]) if (v === p && k !== model) map.delete(k)
  }

  /** The price of a provider's model, or undefined when the book does not know it. */
  find(provider: string, model: string): { price: ModelPrice; provider: ProviderInfo } | undefined {
    const ck = provider + '\0' + model
    const hit = this.cache.get(ck)
    if (hit !== undefined) return hit ?? undefined
    const found = this.lookup(provider, model) ?? null
    if (this.cache.size > 10_000) this.cache.clear()
    this.cache.set(ck, found)
    return found ?? undefined
  }

  private lookup(provider: string, model: string): { price: ModelPrice; provider: ProviderInfo } | undefined {
    const names = modelCandidates(model)
    const pk = this.providerAlias.get(norm(provider))
    const info = pk ? this.providers.get(pk) : undefined
    // An unknown provider (a proxy, a gateway) still gets the model's list price when the name is unique enough.
    const order = info ? [info.key, ...info.fallback] : [...this.providers.keys()]
    for (const name of names) {
      for (const p of order) {
        const price = this.models.get(p)?.get(name)
        // Token semantics (and batch discount) follow the section the model was found in: Claude on
        // Vertex reports Anthropic-style counts, Llama on Bedrock Bedrock-style.
        if (price) return { price, provider: this.providers.get(p)! }
      }
    }
    return undefined
  }
}

/** The token counts of a completion as the client reported them (null/absent → 0). */
function count(v: unknown): number {
  return typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : 0
}

const CLIENT_COST_FIELDS = ['inputTokenCost', 'outputTokenCost', 'cacheCreationTokenCost', 'cacheReadTokenCost'] as const

/**
 * The cost of one completion (DESIGN §6, wire-contract §1.5). Counts are used as reported:
 * OpenAI-style input includes cached tokens (so only the uncached rest is priced at the input
 * rate), Anthropic-style input excludes them; reasoning is part of output unless the model bills
 * it apart. Nothing goes negative; the total is the sum of the rounded parts.
 */
export function priceCompletion(book: PriceBook, body: CompletionBody): Cost {
  if (body.billingSkipped === true) {
    return { currency: 'USD', total: '0', parts: {}, source: 'skipped', note: typeof body.skipReason === 'string' ? body.skipReason : 'billing_skipped' }
  }
  const found = book.find(body.provider, body.model)
  const priced = found ? bookParts(found.price, found.provider, body) : undefined
  const parts: Record<string, string> = priced?.parts ?? {}
  const clientSent = CLIENT_COST_FIELDS.filter((f) => typeof body[f] === 'number')
  const clientTotal = typeof body.totalCost === 'number' ? dec(body.totalCost) : undefined
  if (clientSent.length || clientTotal !== undefined) {
    for (const f of clientSent) parts[f] = money(dec(body[f] as number))
    const total = clientTotal ?? sum(parts)
    const cost: Cost = { currency: 'USD', total: money(total), parts, source: 'client' }
    if (found) cost.priceVersion = found.price.version
    return cost
  }
  if (!found) return { currency: 'USD', total: '0', parts: {}, source: 'unpriced', note: 'unknown_model' }
  return { currency: 'USD', total: priced!.total, parts, source: 'pricebook', priceVersion: found.price.version }
}

function sum(parts: Record<string, string>): D {
  let t = ZERO
  for (const v of Object.values(parts)) t = t.plus(v)
  return t
}

/** A cost part: its name and the (token count, price per million) pairs summed into it. */
type Term = [name: string, pairs: [count: number, rate: D][]]

/** The book's cost parts and their total as money strings (the total is the sum of the rounded parts, as if re-read from the strings). */
function bookParts(p: ModelPrice, provider: ProviderInfo, b: CompletionBody): { parts: Record<string, string>; total: string } {
  const input = count(b.inputTokenCount)
  const output = count(b.outputTokenCount)
  const reasoning = count(b.reasoningTokenCount)
  const cacheRead = count(b.cacheReadTokenCount)
  const cacheCreation = count(b.cacheCreationTokenCount)
  const c5 = count(b.cacheCreation5mTokenCount)
  const c1 = count(b.cacheCreation1hTokenCount)
  const write5m = c5 + Math.max(0, cacheCreation - c5 - c1)

  const prompt = provider.cachedInInput ? input : input + cacheRead + cacheCreation
  let r: Rates = p
  if (p.longContext && prompt > p.longContext.threshold) r = { ...p, ...definedOnly(p.longContext) }
  const uncached = provider.cachedInInput ? Math.max(0, input - cacheRead - cacheCreation) : input
  const readRate = r.cacheRead ?? r.input
  const write5mRate = r.cacheWrite5m ?? r.input
  const write1hRate = r.cacheWrite1h ?? write5mRate
  // Each part: [name, [[count, rate per million], ...]]; several pairs are summed before rounding.
  const terms: Term[] = [
    ['inputTokenCost', [[uncached, r.input]]],
    ['outputTokenCost', [[r.reasoning ? Math.max(0, output - reasoning) : output, r.output]]],
    ['cacheReadTokenCost', [[cacheRead, readRate]]],
    ['cacheCreationTokenCost', [[write5m, write5mRate], [c1, write1hRate]]],
  ]
  if (r.reasoning) terms.push(['reasoningTokenCost', [[Math.min(reasoning, output || reasoning), r.reasoning]]])
  const mult = b.pricingTier === 'BATCH' ? provider.batchMultiplier : undefined
  return (mult === undefined && scaledParts(terms)) || decimalParts(terms, mult)
}

/** bookParts in BigInt (integer token counts, no batch multiplier: nearly every record); false when it does not apply. */
function scaledParts(terms: Term[]): { parts: Record<string, string>; total: string } | false {
  const parts: Record<string, string> = {}
  let total = 0n
  for (const [name, pairs] of terms) {
    let sum: Scaled | undefined
    for (const [n, rate] of pairs) {
      const perToken = Number.isSafeInteger(n) ? perTokenScaled(rate) : null
      if (perToken === null) return false
      const term = timesScaled(n, perToken)
      sum = sum ? plusScaled(sum, term) : term
    }
    const units = roundScaled(sum!)
    parts[name] = moneyOfUnits(units)
    total += units
  }
  return { parts, total: moneyOfUnits(total) }
}

function decimalParts(terms: Term[], mult: D | undefined): { parts: Record<string, string>; total: string } {
  const parts: Record<string, string> = {}
  let total = ZERO
  for (const [name, pairs] of terms) {
    let v = ZERO
    for (const [n, rate] of pairs) v = v.plus(perMillion(n, rate))
    const part = round(mult ? v.times(mult) : v)
    parts[name] = money(part)
    total = total.plus(part)
  }
  return { parts, total: money(total) }
}

function definedOnly(o: object): Partial<Rates> {
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(o)) if (v !== undefined && k !== 'threshold') out[k] = v
  return out as Partial<Rates>
}

export { Decimal }
