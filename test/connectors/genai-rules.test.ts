import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { parse } from 'yaml'
import { iso, nanosToMs } from '../../src/connectors/genai/build.js'
import { cacheOutsideInput } from '../../src/connectors/genai/providers.js'
import { restCounts } from '../../src/connectors/genai/tokens.js'
import { PermanentError, toApiError } from '../../src/core/errors.js'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { PriceBook, priceCompletion, type PriceBookYaml } from '../../src/domain/pricing/price-book.js'
import type { CompletionBody, UsageRecord } from '../../src/model/usage-record.js'
import { attributionOf } from '../../src/processors/attribution/index.js'
import { CALLER, genaiHarness } from '../helpers/genai.js'
import { jsonSpans } from '../helpers/otlp.js'

const PRICES = join(PACKAGE_ROOT, 'config', 'prices.yaml')
const s = (v: string) => ({ stringValue: v })
const i = (v: number | string) => ({ intValue: v })
const kv = (key: string, value: unknown) => ({ key, value })
const span = (spanId: string, attributes: unknown[], extra: Record<string, unknown> = {}) => ({
  traceId: '5c'.repeat(16),
  spanId,
  name: 'chat',
  startTimeUnixNano: '1795305494000000000',
  endTimeUnixNano: '1795305495000000000',
  attributes,
  ...extra,
})
const chat = (model: string, provider: string, more: unknown[] = []) => [
  kv('gen_ai.operation.name', s('chat')),
  kv('gen_ai.provider.name', s(provider)),
  kv('gen_ai.request.model', s(model)),
  ...more,
]
const log = (attributes: unknown[], body = 'claude_code.api_request') => ({ timeUnixNano: '1795305494000000000', body: s(body), attributes })
const logs = (records: unknown[], resource: unknown[] = [kv('service.name', s('claude-code'))]) => ({
  resourceLogs: [{ resource: { attributes: resource }, scopeLogs: [{ scope: { name: 'com.anthropic.claude_code.events' }, logRecords: records }] }],
})

t.test('token arithmetic: converted to the REST meaning of the provider, never negative', async (t) => {
  const cases: [string, Parameters<typeof restCounts>, Partial<ReturnType<typeof restCounts>>][] = [
    ['GenAI, Anthropic: cache leaves input', [{ input: 1000, output: 10, cacheRead: 800, cacheCreation: 100 }, 'in-input', 'anthropic', 'claude-sonnet-4-5'], { inputTokenCount: 100, totalTokenCount: 110 }],
    ['GenAI, OpenAI: input kept', [{ input: 1000, output: 10, cacheRead: 800 }, 'in-input', 'openai', 'gpt-4o'], { inputTokenCount: 1000, totalTokenCount: 1010 }],
    ['GenAI, Claude through a gateway', [{ input: 1000, output: 10, cacheRead: 800 }, 'in-input', 'openrouter', 'anthropic/claude-3.7-sonnet'], { inputTokenCount: 200 }],
    ['GenAI, Nova on Bedrock', [{ input: 500, output: 10, cacheRead: 300 }, 'in-input', 'aws.bedrock', 'amazon.nova-pro-v1:0'], { inputTokenCount: 200 }],
    ['GenAI, a reported total moves with input', [{ input: 1000, output: 10, cacheRead: 800, total: 1010 }, 'in-input', 'anthropic', 'claude-haiku-4-5'], { inputTokenCount: 200, totalTokenCount: 210 }],
    ['GenAI, cache over input never goes negative', [{ input: 100, output: 10, cacheRead: 800, total: 110 }, 'in-input', 'anthropic', 'claude-haiku-4-5'], { inputTokenCount: 0, totalTokenCount: 0 }],
    ['Claude Code, Anthropic: kept', [{ input: 3, output: 400, cacheRead: 48000, cacheCreation: 1000 }, 'beside-input', 'Anthropic', 'claude-sonnet-4-5'], { inputTokenCount: 3, totalTokenCount: 403 }],
    ['Cursor, GPT: cache joins input', [{ input: 500, output: 700, cacheRead: 4000, cacheCreation: 10 }, 'beside-input', 'unknown', 'gpt-5'], { inputTokenCount: 4510, totalTokenCount: 5210 }],
    ['Vercel AI SDK 5: native counts kept', [{ input: 900, output: 120, cacheRead: 4096 }, 'native', 'Anthropic', 'claude-sonnet-4-5'], { inputTokenCount: 900 }],
    ['no usage reported: zeros', [{}, 'in-input', 'openai', 'gpt-4o'], { inputTokenCount: 0, outputTokenCount: 0, totalTokenCount: 0 }],
  ]
  for (const [name, args, want] of cases) t.match(restCounts(...args), want, name)
  t.notOk('cacheReadTokenCount' in restCounts({ input: 1 }, 'in-input', 'openai', 'gpt-4o'), 'an unreported cache count stays unreported')
})

t.test('the cache rule agrees with the price book for every model it prices cache for', async (t) => {
  const yaml = parse(readFileSync(PRICES, 'utf8')) as PriceBookYaml
  const book = new PriceBook(yaml)
  let checked = 0
  for (const [key, section] of Object.entries(yaml.providers)) {
    for (const [model, entry] of Object.entries(section.models)) {
      if (entry.cache_read === undefined && entry.cache_write_5m === undefined) continue
      for (const provider of [key, ...(section.aliases ?? [])]) {
        const found = book.find(provider, model)!
        t.equal(cacheOutsideInput(provider, model), !found.provider.cachedInInput, `${provider} / ${model}`)
        checked++
      }
      // A provider the book does not know (a gateway): the book finds the model by name alone.
      const viaGateway = book.find('some-gateway', model)!
      t.equal(cacheOutsideInput('some-gateway', model), !viaGateway.provider.cachedInInput, `gateway / ${model}`)
    }
  }
  t.ok(checked > 100, `checked ${checked} provider spellings and models`)
})

t.test('the same call costs the same whether a GenAI span or a coding assistant reported it', async (t) => {
  const h = await genaiHarness(t)
  const book = PriceBook.load(PRICES)
  const price = (r: { body: Record<string, unknown> }) => priceCompletion(book, r.body as CompletionBody)
  // One Anthropic call: 200 new input tokens, 4,000 read from cache, 300 written to it, 150 out.
  const fromSpan = await h.run('traces', jsonSpans([span('0000000000000001', chat('claude-sonnet-4-5', 'anthropic', [kv('gen_ai.usage.input_tokens', i(4500)), kv('gen_ai.usage.output_tokens', i(150)), kv('gen_ai.usage.cache_read.input_tokens', i(4000)), kv('gen_ai.usage.cache_creation.input_tokens', i(300))]))]))
  const claudeCode = await h.run('logs', logs([log([kv('model', s('claude-sonnet-4-5')), kv('input_tokens', s('200')), kv('output_tokens', s('150')), kv('cache_read_tokens', s('4000')), kv('cache_creation_tokens', s('300'))])]))
  const a = price(fromSpan.records[0])
  const b = price(claudeCode.records[0])
  t.equal(a.source, 'pricebook')
  t.same(a, b, 'same parts, same total, same price version')
  // Priced by hand: claude-sonnet-4-5 is $3 in, $15 out, $0.30 cache read, $3.75 cache write per million.
  t.equal(a.total, '0.005175', '(200×3 + 150×15 + 4000×0.30 + 300×3.75) / 1e6')

  // One OpenAI call: 1,000 prompt tokens of which 600 cached, 50 out; Cursor counts the cache apart.
  const genai = await h.run('traces', jsonSpans([span('0000000000000002', chat('gpt-4o', 'openai', [kv('gen_ai.usage.input_tokens', i(1000)), kv('gen_ai.usage.output_tokens', i(50)), kv('gen_ai.usage.cache_read.input_tokens', i(600))]))]))
  const cursor = await h.run('logs', logs([log([kv('model', s('gpt-4o')), kv('input_tokens', s('400')), kv('output_tokens', s('50')), kv('cache_read_tokens', s('600')), kv('cache_creation_tokens', s('0'))], 'cursor_ide.api_response')], [kv('service.name', s('cursor-ide'))]))
  t.same(price(genai.records[0]), price(cursor.records[0]))
})

t.test('attribution: resource over record, prefixed over plain, prefixes in order; organization.id is not the organization', async (t) => {
  const h = await genaiHarness(t)
  const resource = [
    kv('service.name', s('claude-code')),
    kv('organization.name', s('Plain Org')),
    kv('revenium.product.name', s('Revenium Product')),
    kv('service.product.name', s('Neutral Product')),
  ]
  const records = [
    log([
      kv('model', s('claude-sonnet-4-5')),
      kv('input_tokens', i(1)),
      kv('output_tokens', i(1)),
      kv('organization.id', s('6f1e0c4a-2b3d-4e5f-8a9b-0c1d2e3f4a5b')),
      kv('revenium.organization.name', s('Record Org')),
      kv('user.email', s('Dev@Acme.Example')),
      kv('revenium.subscriber.credential.name', s('ci-key')),
      kv('revenium.agent.name', s('coder')),
      kv('revenium.trace.type', s('nightly_job')),
      kv('revenium.job.id', s('job-1')),
      kv('revenium.squad.role', s('reviewer')),
      kv('revenium.request.stream', s('true')),
    ]),
  ]
  const run = await h.run('logs', logs(records, resource))
  const body = run.records[0].body
  t.equal(body.organizationName, 'Plain Org', 'the resource wins over the record, even over a prefixed record attribute')
  t.equal(body.productName, 'Neutral Product', 'service. comes before revenium. by default')
  t.same(body.subscriber, { email: 'Dev@Acme.Example', credential: { name: 'ci-key' } })
  t.match(body, { agent: 'coder', traceType: 'nightly_job', agenticJobId: 'job-1', squadRole: 'reviewer', isStreamed: true })
  t.equal((body.attributes as any)['organization.id'], '6f1e0c4a-2b3d-4e5f-8a9b-0c1d2e3f4a5b', 'Anthropic’s organization UUID is kept as an attribute only')
  const dims = attributionOf({ kind: 'completion', body, caller: CALLER } as unknown as UsageRecord)
  t.match(dims, { organizationName: 'Plain Org', productName: 'Neutral Product', subscriberEmail: 'dev@acme.example', subscriberCredentialName: 'ci-key', agent: 'coder', traceId: body.traceId ?? '' }, 'the attribution processor reads them as REST fields')

  // Configured prefixes replace the defaults.
  const custom = await h.run('logs', logs(records, [...resource, kv('acme.organization.name', s('Acme From Prefix'))]), { config: { attribute_prefixes: ['acme.'] } })
  t.equal(custom.records[0].body.organizationName, 'Acme From Prefix')
  t.equal(custom.records[0].body.productName, undefined, 'revenium. and service. are not read then')
})

t.test('an API key in the attributes is stored nowhere', async (t) => {
  const h = await genaiHarness(t)
  const secret = 'hak_acme_secretsecretsecret01'
  const payload = logs(
    [log([kv('model', s('claude-sonnet-4-5')), kv('input_tokens', i(1)), kv('output_tokens', i(1)), kv('revenium.api_key', s(secret)), kv('service.api_key', s(secret))])],
    [kv('service.name', s('claude-code')), kv('revenium.api_key', s(secret)), kv('acme.api_key', s('hak_acme_otherkeyother02'))],
  )
  const run = await h.run('logs', payload)
  t.equal(run.records.length, 1)
  t.notMatch(JSON.stringify(run.records), secret, 'not in the body, not in the kept attributes')
  t.match(JSON.stringify(run.records), 'acme.api_key', 'a name outside the prefixes is an ordinary attribute')
  const custom = await h.run('logs', payload, { config: { attribute_prefixes: ['acme.'] } })
  t.notMatch(JSON.stringify(custom.records[0].body), 'hak_acme_otherkeyother02', 'with prefix acme., acme.api_key is a key')
  t.notMatch(JSON.stringify(custom.records[0].body), secret, 'and the default names stay keys')
})

t.test('content attributes are dropped by default, kept when the operator says so', async (t) => {
  const h = await genaiHarness(t)
  const attrs = chat('gpt-4o', 'openai', [kv('gen_ai.input.messages', s('[{"role":"user"}]')), kv('gen_ai.prompt.0.content', s('hi')), kv('gen_ai.promptly', s('not content')), kv('app.tenant', s('t-9'))])
  const d = await h.run('traces', jsonSpans([span('0000000000000003', attrs)]))
  t.same(d.records[0].body.attributes, { 'gen_ai.promptly': 'not content', 'app.tenant': 't-9' }, 'a name drops itself and the names below it, not names that merely start alike')
  const kept = await h.run('traces', jsonSpans([span('0000000000000003', attrs)]), { config: { drop_attributes: [] } })
  t.match(kept.records[0].body.attributes, { 'gen_ai.input.messages': '[{"role":"user"}]', 'gen_ai.prompt.0.content': 'hi' })
})

t.test('transactionId: the ids clients send first, else a stable hash; a repeated item is stored once', async (t) => {
  const h = await genaiHarness(t)
  const base = chat('gpt-4o', 'openai', [kv('gen_ai.usage.input_tokens', i(1))])
  const payload = jsonSpans([
    span('0000000000000011', [...base, kv('gen_ai.response.id', s('chatcmpl-1')), kv('request_id', s('req-1')), kv('transaction_id', s('tx-1'))]),
    span('0000000000000012', [...base, kv('gen_ai.response.id', s('chatcmpl-2')), kv('request_id', s('req-2'))]),
    span('0000000000000013', [...base, kv('gen_ai.response.id', s('chatcmpl-3'))]),
    span('0000000000000014', base),
    span('0000000000000014', base),
    span('0000000000000015', [...base, kv('transaction_id', s('x'.repeat(300)))]),
  ])
  const first = await h.run('traces', payload)
  const ids = first.records.map((r) => r.body.transactionId as string)
  t.equal(ids.length, 5, 'the repeated span became one record')
  t.same(ids.slice(0, 3), ['tx-1', 'req-2', 'chatcmpl-3'])
  t.match(ids[3], /^[0-9a-f]{32}$/, 'a hash of trace id and span id')
  t.match(ids[4], /^[0-9a-f]{32}$/, 'an id longer than 255 characters is hashed')
  const again = await h.run('traces', payload, { encoding: 'protobuf' })
  t.same(again.records.map((r) => r.body.transactionId), ids, 'a retried export, over the other encoding, has the same ids')

  // A log record without an id: a hash of the record, the same on every retry, different per record.
  const a = await h.run('logs', logs([log([kv('model', s('m')), kv('input_tokens', i(1))]), log([kv('model', s('m')), kv('input_tokens', i(2))])]))
  const b = await h.run('logs', logs([log([kv('model', s('m')), kv('input_tokens', i(1))]), log([kv('model', s('m')), kv('input_tokens', i(2))])]), { encoding: 'protobuf' })
  t.same(a.records.map((r) => r.body.transactionId), b.records.map((r) => r.body.transactionId))
  t.not(a.records[0].body.transactionId, a.records[1].body.transactionId)
})

t.test('rejections: one bad item is listed, a batch of only bad items is a 400', async (t) => {
  const h = await genaiHarness(t)
  const negative = span('0000000000000021', chat('gpt-4o', 'openai', [kv('gen_ai.usage.input_tokens', i(-5))]))
  const one = await h.run('traces', jsonSpans([negative]))
  t.ok(one.error instanceof PermanentError, 'every item rejected: the batch fails')
  const answer = toApiError(one.error)
  t.equal(answer.status, 400)
  t.equal(answer.code, 'invalid_otlp_items')
  t.match(answer.message, /gen_ai\.usage\.input_tokens must be a non-negative integer, got -5/)
  t.same(one.rejected, [{ index: 0, message: 'gen_ai.usage.input_tokens must be a non-negative integer, got -5' }], 'and lists it')

  const plain = await h.run('traces', jsonSpans([span('0000000000000022', [kv('http.route', s('/x'))])]))
  t.same(plain, { records: [], rejected: [], error: undefined }, 'spans that are not usage are passed over: nothing stored, nothing rejected')
  // Odd values in the names that decide what an item is do not refuse an item that is not usage.
  const odd = await h.run('traces', jsonSpans([span('0000000000000023', [kv('gen_ai.operation.name', { arrayValue: { values: [s('chat')] } }), kv('ai.operationId', i(7))])]))
  t.same(odd, { records: [], rejected: [], error: undefined }, 'a span with non-string operation names')
  const oddLog = await h.run('logs', logs([{ timeUnixNano: '1', attributes: [kv('event.name', { kvlistValue: { values: [] } })], body: { kvlistValue: { values: [kv('a', i(1))] } } }]))
  t.same(oddLog, { records: [], rejected: [], error: undefined }, 'a log record with a map event name and a map body')
})

t.test('a duration reaching past the range of dates rejects its record alone, never fails the export', async (t) => {
  // duration_ms 1e20 put the start at -1e20 ms: writing requestTime threw a RangeError, the
  // export was answered 503 and the exporter retried it, good records with it, for ever.
  const h = await genaiHarness(t)
  const good = log([kv('model', s('claude-sonnet-4-5')), kv('input_tokens', i(10)), kv('request_id', s('req-good'))])
  const far = log([kv('model', s('claude-sonnet-4-5')), kv('input_tokens', i(10)), kv('request_id', s('req-far')), kv('duration_ms', { doubleValue: 1e20 })])
  const run = await h.run('logs', logs([good, far]))
  t.equal(run.error, undefined, 'the export is not failed')
  t.same(run.records.map((r) => r.body.transactionId), ['req-good'], 'the good record is kept')
  t.equal(run.rejected.length, 1)
  t.match(run.rejected[0], { index: 1, message: /out of range/ }, 'the far one is rejected, saying why')
  const alone = await h.run('logs', logs([far]))
  t.equal(toApiError(alone.error).status, 400, 'alone, it is a 400 (gRPC INVALID_ARGUMENT), not retried')
})

t.test('the records travel with the batch context; execute_tool needs a registered tool of the caller', async (t) => {
  const h = await genaiHarness(t)
  const tool = span('0000000000000031', [kv('gen_ai.operation.name', s('execute_tool')), kv('gen_ai.tool.name', s('web-search'))])
  const withCaller = await h.run('traces', jsonSpans([tool]))
  t.equal(withCaller.records[0]?.kind, 'tool', 'a registered tool of the caller’s team becomes a tool event')
  const noCaller = await h.run('traces', jsonSpans([tool]), { ctx: {} })
  t.same(noCaller.records, [], 'without a caller there is no team to look the tool up for')
})

t.test('record times are written as Date#toISOString writes them, whatever the time', async (t) => {
  // The formatter keeps the last second it formatted: times in and across seconds, in any order.
  const times = [0, 1, 999, 1000, 1795305494866.7, 1795305494866.2, 1795305495000, -1, -1001.5, 8.64e15, -8.64e15, 253402300800000, -62198755200001]
  for (let i = 0; i < 2000; i++) times.push((i % 7) * 997 + 1795305494000 + (i % 3) * 0.4, (i * 7919 % 1e6) * 1e8 - 3e13)
  for (const ms of times) if (iso(ms) !== new Date(Math.floor(ms)).toISOString()) t.fail(`${ms}: ${iso(ms)}`)
  for (const ms of [NaN, 8.64e15 + 1, -Infinity]) t.throws(() => iso(ms), RangeError, `${ms}: a RangeError, as Date's`)
  t.pass(`${times.length} times`)
})

t.test('nanosecond timestamps become the same milliseconds as Number() of their two parts, whatever the text', async (t) => {
  // The reference: the rule before the digit-by-digit reading (exact for every digit string it reads).
  const reference = (n: string): number => (n.length <= 6 ? Number(n) / 1e6 : Number(n.slice(0, -6)) + Number(n.slice(-6)) / 1e6)
  const texts = ['0', '1', '999999', '1000000', '1000001', '1795305494866122460', '18446744073709551615', '9007199254740993000000', '000000001795305494866122460',
    '123456789012345678901', '1234567890123456789012', ' 1795305494866122460', '1795305494866122460 ', '+1795305494866122460', '-1795305494866122460', '17953054948661224.0',
    '1795305494866x22460', '1e+21000000', '0x1234567890', '1_795305494866122460', '١٧٩٥٣٠٥٤٩٤٨٦٦١٢٢٤٦٠', '', '12345678']
  for (let i = 0; i < 3000; i++) {
    const digits = String(Math.floor(Math.random() * 1e15)) + String(Math.floor(Math.random() * 1e6)).padStart(6, '0')
    texts.push(digits, digits.slice(i % 7), digits.slice(0, 7 + (i % 15)))
  }
  for (const n of texts) if (!Object.is(nanosToMs(n), reference(n))) t.fail(`${JSON.stringify(n)}: ${nanosToMs(n)}, not ${reference(n)}`)
  t.equal(nanosToMs('1795305494866122460'), 1795305494866.12246)
  t.pass(`${texts.length} texts`)
})
