import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { completion, goAnthropic } from '../fixtures/wire-examples.js'
import { call } from '../helpers/meterd.js'
import { PriceBook, priceCompletion } from '../../src/domain/pricing/price-book.js'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { readBack, startPricing } from '../helpers/pricing.js'

async function priced(m: { url: string }, key: string, body: Record<string, unknown>) {
  const res = await call(`${m.url}/meter/v2/ai/completions`, { key, body })
  if (res.status !== 201) throw new Error(`${res.status} ${res.text}`)
  return readBack(m as any, key, 'completion', body.transactionId as string)
}

const zeroCache = { reasoningTokenCount: 0, cacheReadTokenCount: 0, cacheCreationTokenCount: 0 }

t.test('golden costs: OpenAI, Anthropic and Google, with cached and reasoning tokens', async (t) => {
  const m = await startPricing(t)
  const key = await m.key()
  const cases: [string, Record<string, unknown>, Record<string, string>, string][] = [
    [
      'OpenAI gpt-4o-mini: input includes 400 cached; reasoning inside output',
      { provider: 'OpenAI', model: 'gpt-4o-mini', inputTokenCount: 1000, outputTokenCount: 500, totalTokenCount: 1500, reasoningTokenCount: 200, cacheReadTokenCount: 400, cacheCreationTokenCount: 0 },
      { inputTokenCost: '0.00009', cacheReadTokenCost: '0.00003', outputTokenCost: '0.0003', cacheCreationTokenCost: '0' },
      '0.00042',
    ],
    [
      'OpenAI o3, dated snapshot, provider in capitals',
      { provider: 'OPENAI', model: 'o3-2025-04-16', inputTokenCount: 2000, outputTokenCount: 3000, totalTokenCount: 5000, reasoningTokenCount: 2500, cacheReadTokenCount: 1000, cacheCreationTokenCount: 0 },
      { inputTokenCost: '0.002', cacheReadTokenCost: '0.0005', outputTokenCost: '0.024', cacheCreationTokenCost: '0' },
      '0.0265',
    ],
    [
      'Anthropic claude-sonnet-4-5 (the Go SDK example): input excludes 4,096 cache reads',
      { ...goAnthropic },
      { inputTokenCost: '0.0027', outputTokenCost: '0.0018', cacheReadTokenCost: '0.0012288', cacheCreationTokenCost: '0' },
      '0.0057288',
    ],
    [
      'Anthropic claude-opus-4-1 with 5-minute and 1-hour cache writes',
      { provider: 'Anthropic', model: 'claude-opus-4-1-20250805', inputTokenCount: 100, outputTokenCount: 50, totalTokenCount: 150, cacheReadTokenCount: 0, cacheCreationTokenCount: 3000, cacheCreation5mTokenCount: 1000, cacheCreation1hTokenCount: 2000 },
      { inputTokenCost: '0.0015', outputTokenCost: '0.00375', cacheReadTokenCost: '0', cacheCreationTokenCost: '0.07875' },
      '0.084',
    ],
    [
      'Anthropic claude-sonnet-4 above 200k prompt tokens (input + cache): long-context rates',
      { provider: 'anthropic', model: 'claude-sonnet-4-20250514', inputTokenCount: 150000, outputTokenCount: 1000, totalTokenCount: 151000, cacheReadTokenCount: 60000, cacheCreationTokenCount: 0 },
      { inputTokenCost: '0.9', outputTokenCost: '0.0225', cacheReadTokenCost: '0.036', cacheCreationTokenCost: '0' },
      '0.9585',
    ],
    [
      'Google gemini-2.5-flash: input includes cached tokens; thinking is output',
      { provider: 'Google', model: 'gemini-2.5-flash', inputTokenCount: 10000, outputTokenCount: 1000, totalTokenCount: 11000, reasoningTokenCount: 600, cacheReadTokenCount: 2000 },
      { inputTokenCost: '0.0024', cacheReadTokenCost: '0.00006', outputTokenCost: '0.0025', cacheCreationTokenCost: '0' },
      '0.00496',
    ],
    [
      'Google gemini-2.5-pro above 200k: long-context rates for every token',
      { provider: 'google_vertex_ai', model: 'gemini-2.5-pro', inputTokenCount: 250000, outputTokenCount: 2000, totalTokenCount: 252000, reasoningTokenCount: 1500, cacheReadTokenCount: 50000 },
      { inputTokenCost: '0.5', cacheReadTokenCost: '0.0125', outputTokenCost: '0.03', cacheCreationTokenCost: '0' },
      '0.5425',
    ],
  ]
  for (const [name, fields, parts, total] of cases) {
    const r = await priced(m, key, completion({ ...zeroCache, ...fields, transactionId: `gold-${name.length}-${Math.random()}` }))
    t.equal(r.cost.source, 'pricebook', `${name}: source`)
    t.same(r.cost.parts, parts, `${name}: parts`)
    t.equal(r.cost.total, total, `${name}: total`)
    t.equal(r.totalCost, Number(total), `${name}: totalCost as a JSON number`)
    t.equal(r.inputTokenCost, Number(parts.inputTokenCost), `${name}: inputTokenCost as a JSON number`)
    t.match(r.cost.priceVersion, /^pricebook:\d{4}-\d{2}-\d{2}:/, `${name}: price version stored`)
    t.equal(r.totalTokenCount, fields.totalTokenCount, `${name}: totals are never recomputed`)
  }
})

t.test('client costs override the book; billingSkipped is free; unknown models are unpriced and counted', async (t) => {
  const m = await startPricing(t)
  const key = await m.key()
  const client = await priced(m, key, completion({ totalCost: 0.5, inputTokenCost: 0.2 }))
  t.equal(client.cost.source, 'client')
  t.equal(client.cost.total, '0.5')
  t.equal(client.cost.parts.inputTokenCost, '0.2')
  t.equal(client.totalCost, 0.5, 'the client value reads back as sent')

  const skipped = await priced(m, key, completion({ billingSkipped: true, skipReason: 'FREE_TIER' }))
  t.same([skipped.cost.source, skipped.cost.total, skipped.cost.note], ['skipped', '0', 'FREE_TIER'])

  const unknown = await priced(m, key, completion({ provider: 'Ollama', model: 'llama3-homebrew' }))
  t.same([unknown.cost.source, unknown.cost.note, unknown.cost.total], ['unpriced', 'unknown_model', '0'])
  const metrics = await call(`${m.url}/metrics`)
  t.match(metrics.text, /meterd_unpriced_records_total\{kind="completion",reason="unknown_model"\} 1/)
  for (const source of ['client', 'skipped', 'unpriced']) {
    t.match(metrics.text, new RegExp(`meterd_priced_records_total\\{kind="completion",source="${source}"\\} 1\\b`), `one record counted under source ${source}`)
  }

  const weird = await priced(m, key, completion({ provider: 'openai', model: 'gpt-4o', inputTokenCount: 10, outputTokenCount: 5, totalTokenCount: 15, cacheReadTokenCount: 50 }))
  t.equal(weird.cost.parts.inputTokenCost, '0', 'more cached than input never goes negative')
  t.equal(weird.cost.total, '0.0001125', '50 cache reads at 1.25 + 5 output at 10')
})

t.test('model matching: aliases, dated suffixes, host prefixes, case', async (t) => {
  const book = PriceBook.load(join(PACKAGE_ROOT, 'config/prices.yaml'))
  t.ok(book.size >= 100, `${book.size} models in the book`)
  const v = (p: string, model: string) => book.find(p, model)?.price.version.replace(/^pricebook:[^:]+:/, '')
  t.equal(v('OpenAI', 'gpt-4o-2024-08-06'), 'openai/gpt-4o@2024-08-06')
  t.equal(v('openai', 'gpt-4o-2024-05-13'), 'openai/gpt-4o-2024-05-13@2024-05-13', 'a dated snapshot with its own price wins')
  t.equal(v('Azure', 'gpt-4.1-mini'), 'openai/gpt-4.1-mini@2025-04-14')
  t.equal(v('Amazon Bedrock', 'us.anthropic.claude-3-5-haiku-20241022-v1:0'), 'anthropic/claude-3-5-haiku@2024-10-22')
  t.equal(v('bedrock', 'meta.llama3-3-70b-instruct-v1:0'), 'amazon/llama3-3-70b-instruct@2024-12-19')
  t.equal(v('Together', 'meta-llama/Llama-3.3-70B-Instruct-Turbo'), 'together/llama-3.3-70b-instruct-turbo@2024-12-06')
  t.equal(v('Google', 'gemini-1.5-pro-002'), 'google/gemini-1.5-pro@2024-10-01')
  t.equal(v('mistral', 'mistral-large-2411'), 'mistral/mistral-large@2024-11-18')
  t.equal(v('xAI', 'grok-4-0709'), 'xai/grok-4@2025-07-09')
  t.equal(v('DeepSeek', 'deepseek-chat'), 'deepseek/deepseek-chat@2025-09-29')
  t.equal(v('Cohere', 'command-r-plus'), 'cohere/command-r-plus-08-2024@2024-08-30')
  t.equal(v('litellm', 'claude-haiku-4-5'), 'anthropic/claude-haiku-4-5@2025-10-15', 'an unknown host still finds a unique model')
  t.equal(v('Ollama', 'llama3'), undefined)
  const batch = priceCompletion(book, { ...goAnthropic, pricingTier: 'BATCH' } as any)
  t.equal(batch.total, '0.0028644', 'batch requests at half price')
})

t.test('dated ids: a month-year date is stripped before -preview, so preview models keep their own price', async (t) => {
  const book = PriceBook.load(join(PACKAGE_ROOT, 'config/prices.yaml'))
  const v = (p: string, model: string) => book.find(p, model)?.price.version.replace(/^pricebook:[^:]+:/, '')
  // The real id Google's API reports for the computer-use model: it used to find no price at all.
  t.equal(v('Google', 'gemini-2.5-computer-use-preview-10-2025'), 'google/gemini-2.5-computer-use-preview@2025-10-07')
  t.equal(v('vertex_ai', 'models/gemini-2.5-computer-use-preview-10-2025'), 'google/gemini-2.5-computer-use-preview@2025-10-07', 'with a host prefix')
  const cu = priceCompletion(book, { provider: 'Google', model: 'gemini-2.5-computer-use-preview-10-2025', inputTokenCount: 10000, outputTokenCount: 1000 } as any)
  t.match(cu, { source: 'pricebook', total: '0.0225' }, '10k input at 1.25 + 1k output at 10 per million')
  // Neighbours that must keep matching as before.
  t.equal(v('Google', 'gemini-2.5-flash-preview-05-20'), 'google/gemini-2.5-flash@2025-06-17', 'a -preview-MM-DD suffix still goes with the word preview')
  t.equal(v('Google', 'gemini-2.5-flash-preview-09-2025'), 'google/gemini-2.5-flash@2025-06-17', 'month-year, then -preview')
  t.equal(v('Google', 'gemini-2.5-flash-lite-preview-06-17'), 'google/gemini-2.5-flash-lite@2025-07-22')
  t.equal(v('Google', 'gemini-3-pro-preview'), 'google/gemini-3-pro-preview@2025-11-18', 'a preview model listed by its own name')
  t.equal(v('Google', 'gemini-2.0-flash-exp'), 'google/gemini-2.0-flash@2025-02-05')
  t.equal(v('OpenAI', 'gpt-4o-realtime-preview-2024-12-17'), 'openai/gpt-4o-realtime-preview@2024-12-17', 'ISO date before -preview')
  t.equal(v('OpenAI', 'gpt-4o-mini-search-preview-2025-03-11'), 'openai/gpt-4o-mini-search-preview@2025-03-11')
  t.equal(v('OpenAI', 'o3-2025-04-16'), 'openai/o3@2025-06-10')
  t.equal(v('Anthropic', 'claude-sonnet-4-5-20250929'), 'anthropic/claude-sonnet-4-5@2025-09-29')
  t.equal(v('Anthropic', 'claude-3-5-sonnet@20241022'), 'anthropic/claude-3-5-sonnet@2024-10-22')
  t.equal(v('Cohere', 'command-a-03-2025'), 'cohere/command-a-03-2025@2025-03-13', 'a month-year that is part of the listed name still matches exactly')
  t.equal(v('Cohere', 'command-r7b-12-2024'), 'cohere/command-r7b-12-2024@2024-12-13')
})

t.test('prices corrected against the providers\' pages (issue 15): cache, reasoning and embedding rates', async (t) => {
  const book = PriceBook.load(join(PACKAGE_ROOT, 'config/prices.yaml'))
  const cost = (body: Record<string, unknown>) => priceCompletion(book, body as any)
  // Groq gpt-oss-120b: $0.15 in, $0.075 cached (half, console.groq.com/docs/prompt-caching), $0.60 out.
  t.match(
    cost({ provider: 'Groq', model: 'openai/gpt-oss-120b', inputTokenCount: 10000, outputTokenCount: 1000, cacheReadTokenCount: 4000 }),
    { total: '0.0018', parts: { inputTokenCost: '0.0009', cacheReadTokenCost: '0.0003', outputTokenCost: '0.0006' } },
    'gpt-oss-120b: 6,000 uncached + 4,000 cached input, 1,000 output',
  )
  t.match(
    cost({ provider: 'groq', model: 'openai/gpt-oss-20b', inputTokenCount: 10000, outputTokenCount: 1000, cacheReadTokenCount: 4000 }),
    { total: '0.0009', parts: { inputTokenCost: '0.00045', cacheReadTokenCost: '0.00015', outputTokenCost: '0.0003' } },
  )
  t.match(
    cost({ provider: 'Groq', model: 'moonshotai/kimi-k2-instruct-0905', inputTokenCount: 10000, outputTokenCount: 1000, cacheReadTokenCount: 4000 }),
    { total: '0.011', parts: { inputTokenCost: '0.006', cacheReadTokenCost: '0.002', outputTokenCost: '0.003' } },
    'Kimi K2 cache hits at half the input rate',
  )
  // Perplexity bills Deep Research's reasoning tokens at $3, not at the $8 output rate.
  t.match(
    cost({ provider: 'perplexity', model: 'sonar-deep-research', inputTokenCount: 1000, outputTokenCount: 5000, reasoningTokenCount: 3000 }),
    { total: '0.027', parts: { inputTokenCost: '0.002', outputTokenCost: '0.016', reasoningTokenCost: '0.009' } },
  )
  // Titan Text Embeddings V1 costs five times V2; both ids used to find the V2 price.
  t.match(cost({ provider: 'Amazon Bedrock', model: 'amazon.titan-embed-text-v1', inputTokenCount: 1_000_000, outputTokenCount: 0 }), { total: '0.1' })
  t.match(cost({ provider: 'Amazon Bedrock', model: 'amazon.titan-embed-text-v2:0', inputTokenCount: 1_000_000, outputTokenCount: 0 }), { total: '0.02' })
  t.match(book.find('groq', 'gpt-oss-120b')?.price, { source: /console\.groq\.com\/docs\/prompt-caching/ }, 'the entry carries where its price was read')
})

t.test('an operator override wins; a price change after ingest leaves stored costs unchanged', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'meterd-prices-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  const body = completion({ provider: 'OpenAI', model: 'gpt-4o-mini', inputTokenCount: 1000, outputTokenCount: 500, totalTokenCount: 1500, cacheReadTokenCount: 0 })

  const before = await startPricing(t, { dataDir })
  const key = await before.key()
  const first = await priced(before, key, body)
  t.equal(first.cost.total, '0.00045', 'book price: 1000 × 0.15 + 500 × 0.60 per million')
  await before.close()

  const after = await startPricing(t, {
    dataDir,
    processors: { pricing: { models: [{ provider: 'openai', model: 'gpt-4o-mini', effective: '2026-12-01', input: 1, output: '2' }] } },
  })
  const again = await readBack(after, key, 'completion', body.transactionId as string)
  t.same(again.cost, first.cost, 'the stored cost and its price version did not change')
  const second = await priced(after, key, completion({ provider: 'OpenAI', model: 'gpt-4o-mini-2024-07-18', inputTokenCount: 1000, outputTokenCount: 500, totalTokenCount: 1500, cacheReadTokenCount: 0 }))
  t.equal(second.cost.total, '0.002', 'the override prices new records (dated name still matches)')
  t.equal(second.cost.priceVersion, 'config:openai/gpt-4o-mini@2026-12-01')
})

t.test('a price book entry past 10^9 USD is refused when the book loads, naming the model and the field', async (t) => {
  const book = (rates: Record<string, unknown>) => ({ version: 'x', providers: { acme: { models: { big: { effective: '2026-01-01', input: 1, output: 1, ...rates } } } } })
  t.doesNotThrow(() => new PriceBook(book({ output: '1000000000' }) as never), 'the bound itself is a price')
  t.throws(() => new PriceBook(book({ cache_read: '1000000000.5' }) as never), /acme\/big: cache_read must be at most 1000000000/)
  t.throws(() => new PriceBook(book({ long_context: { threshold: 5, input: 1e21 } }) as never), /acme\/big: long_context\.input must be at most/)
  t.throws(() => new PriceBook(book({}) as never, [{ provider: 'acme', model: 'm2', effective: '2026-01-01', input: 2e9, output: 1 }]), /acme\/m2: input must be at most/, 'an override too')
})
