import t from 'tap'
import { call } from '../helpers/meterd.js'
import { API, createTool, event, postEvent, startPricing, TIERS, toolBody } from '../helpers/pricing.js'

const TOOLS = `${API}/tools`
const valid = () => toolBody('experian-credit-check', { name: 'requests', unitPrice: 0.05, aggregationType: 'COUNT', tiers: TIERS }, { teamId: 'team-a', description: 'credit', toolProvider: 'experian', enabled: true, version: '1.0' })

t.test('CRUD, by-tool-id, list as HAL or array, delete and restore', async (t) => {
  const m = await startPricing(t)
  const key = await m.key()
  const created = await createTool(m, key, valid())
  t.match(created, { id: String, toolId: 'experian-credit-check', teamId: 'team-a', team: { id: 'team-a' }, toolType: 'REST_API', enabled: true, configSource: 'DATABASE' })
  t.same(created.pricing.elements[0].tiers, [{ upTo: 1000, unitPrice: 0.01 }, { upTo: 10000, unitPrice: 0.008 }, { upTo: null, unitPrice: 0.005 }], 'decimal strings and numbers read back as numbers')
  t.equal(created.pricing.elements[0].tiersMode, 'volume', 'volume is the default')

  t.equal((await call(`${m.url}${TOOLS}/${created.id}`, { key })).body.name, 'experian-credit-check')
  t.equal((await call(`${m.url}${TOOLS}/by-tool-id/experian-credit-check`, { key })).body.id, created.id)
  await createTool(m, key, toolBody('a-first', { name: 'n', unitPrice: '0.1', aggregationType: 'SUM' }, { toolType: 'TOOL_CALL' }))

  const hal = await call(`${m.url}${TOOLS}?page=0&size=1&teamId=team-a`, { key })
  t.equal(hal.status, 200)
  t.same(hal.body.page, { size: 1, totalElements: 2, totalPages: 2, number: 0 })
  t.equal(hal.body._embedded.toolResourceList[0].toolId, 'a-first', 'sorted by toolId')
  const arr = await call(`${m.url}${TOOLS}?format=array`, { key })
  t.same(arr.body.map((x: any) => x.toolId), ['a-first', 'experian-credit-check'])

  const put = await call(`${m.url}${TOOLS}/${created.id}`, { key, method: 'PUT', body: { ...created, name: 'Experian', description: 'v2' } })
  t.equal(put.status, 200)
  t.match(put.body, { name: 'Experian', description: 'v2', revision: 2 })

  t.equal((await call(`${m.url}${TOOLS}`, { key, body: valid() })).status, 409, 'toolId is unique per team')
  const del = await call(`${m.url}${TOOLS}/${created.id}`, { key, method: 'DELETE' })
  t.equal(del.status, 200)
  t.equal((await call(`${m.url}${TOOLS}/${created.id}`, { key })).status, 404, 'deleted: not found')
  t.equal((await call(`${m.url}${TOOLS}/by-tool-id/experian-credit-check`, { key })).status, 404)
  const restored = await call(`${m.url}${TOOLS}/${created.id}/restore`, { key, method: 'POST' })
  t.equal(restored.status, 200)
  t.equal(restored.body.deleted, undefined)
  t.equal((await call(`${m.url}${TOOLS}/by-tool-id/experian-credit-check`, { key })).body.id, created.id, 'restored under its toolId')
})

t.test('list filters: toolType and enabled filter, a value that names nothing is a 400 naming the parameter', async (t) => {
  const m = await startPricing(t)
  const key = await m.key()
  await createTool(m, key, toolBody('on-rest', { name: 'n', unitPrice: 1, aggregationType: 'COUNT' }))
  await createTool(m, key, toolBody('off-mcp', { name: 'n', unitPrice: 1, aggregationType: 'COUNT' }, { toolType: 'MCP_SERVER', enabled: false }))
  const ids = async (q: string) => (await call(`${m.url}${TOOLS}?format=array&${q}`, { key })).body.map((x: any) => x.toolId)
  t.same(await ids('enabled=false'), ['off-mcp'])
  t.same(await ids('enabled=True'), ['on-rest'], "Python's spelling of true")
  t.same(await ids('toolType=MCP%20Server'), ['off-mcp'], 'the label the body accepts filters too')
  t.same(await ids('toolType=rest_api&enabled='), ['on-rest'], 'an empty value is no filter')
  for (const [q, param] of [['enabled=maybe', 'enabled'], ['enabled=1', 'enabled'], ['toolType=NOPE', 'toolType'], ['includeDeleted=yes', 'includeDeleted']]) {
    const res = await call(`${m.url}${TOOLS}?${q}`, { key })
    t.equal(res.status, 400, `${q}: 400`)
    t.match(res.body.error, { type: 'invalid_request_error', code: 'invalid_parameter', param }, `${q}: names ${param}`)
  }
})

t.test('validation: each failure is a 400 naming the field', async (t) => {
  const m = await startPricing(t)
  const key = await m.key()
  const el = (e: Record<string, unknown>) => toolBody('v', { name: 'n', aggregationType: 'COUNT', unitPrice: 1, ...e })
  const cases: [string, unknown, string][] = [
    ['bad toolId', { ...valid(), toolId: 'has space' }, 'toolId'],
    ['missing toolId', { ...valid(), toolId: undefined }, 'toolId'],
    ['missing name', { ...valid(), name: '' }, 'name'],
    ['unknown toolType', { ...valid(), toolType: 'ROBOT' }, 'toolType'],
    ['negative unitPrice', el({ unitPrice: -1 }), 'pricing.elements[0].unitPrice'],
    ['bad decimal string', el({ unitPrice: '1,5' }), 'pricing.elements[0].unitPrice'],
    ['unknown aggregation', el({ aggregationType: 'MEDIAN' }), 'pricing.elements[0].aggregationType'],
    ['unknown tiersMode', el({ tiersMode: 'stairs', tiers: TIERS }), 'pricing.elements[0].tiersMode'],
    ['tiers out of order', el({ tiers: [{ upTo: 100, unitPrice: 1 }, { upTo: 50, unitPrice: 1 }] }), 'pricing.elements[0].tiers[1].upTo'],
    ['unlimited before the last', el({ tiers: [{ upTo: null, unitPrice: 1 }, { upTo: 50, unitPrice: 1 }] }), 'pricing.elements[0].tiers[0].upTo'],
    ['negative tier price', el({ tiers: [{ upTo: null, unitPrice: -0.1 }] }), 'pricing.elements[0].tiers[0].unitPrice'],
    // Such prices read back as 1e+21, or as a neighbouring number past 2^53, and their costs overflow ClickHouse's Decimal128(12).
    ['unitPrice past 10^9', el({ unitPrice: 1e21 }), 'pricing.elements[0].unitPrice'],
    ['unitPrice past 10^9 as a string', el({ unitPrice: '1000000000.000000000001' }), 'pricing.elements[0].unitPrice'],
    ['tier price past 10^9', el({ tiers: [{ upTo: 10, unitPrice: 1 }, { upTo: null, unitPrice: '9007199254740993' }] }), 'pricing.elements[0].tiers[1].unitPrice'],
    ['non-USD', { ...valid(), pricing: { currency: 'EUR', elements: [] } }, 'pricing.currency'],
    // Its usage would be priced at nothing: "__proto__" is no key of the objects usage is read from.
    ['element named __proto__', el({ name: '__proto__' }), 'pricing.elements[0].name'],
  ]
  for (const [name, body, param] of cases) {
    const res = await call(`${m.url}${TOOLS}`, { key, body })
    t.equal(res.status, 400, `${name}: 400`)
    t.equal(res.body?.error?.param, param, `${name}: names ${param}`)
    t.equal(res.body?.error?.type, 'invalid_request_error')
  }
  const bound = await call(`${m.url}${TOOLS}`, { key, body: toolBody('at-the-bound', { name: 'n', aggregationType: 'COUNT', unitPrice: '1000000000' }) })
  t.equal(bound.status, 201, 'a price of 10^9 is taken')
  t.equal(bound.body.pricing.elements[0].unitPrice, 1000000000)
  const over = await call(`${m.url}${TOOLS}`, { key, body: el({ unitPrice: 1e21 }) })
  t.match(over.body.error, { code: 'invalid_field', message: /at most 1000000000/ }, 'the message gives the bound')
  const ok = await call(`${m.url}${TOOLS}`, { key, body: { ...valid(), toolType: 'MCP Server' } })
  t.equal(ok.body.toolType, 'MCP_SERVER', "the docs' label is accepted")
  t.equal((await call(`${m.url}${TOOLS}/${ok.body.id}`, { key, method: 'PUT', body: { pricing: { elements: [{ name: 'x', aggregationType: 'SUM', unitPrice: -2 }] } } })).status, 400, 'PUT validates too')
})

t.test('team isolation and scopes', async (t) => {
  const m = await startPricing(t)
  const a = await m.key({ team: 'team-a' })
  const b = await m.key({ team: 'team-b', account: 'acct-2' })
  const readOnly = await m.key({ team: 'team-a', scopes: ['platform:read'] })
  const tool = await createTool(m, a, valid())
  t.equal((await call(`${m.url}${TOOLS}/${tool.id}`, { key: b })).status, 404, "another team's key sees 404")
  t.equal((await call(`${m.url}${TOOLS}/by-tool-id/${tool.toolId}`, { key: b })).status, 404)
  t.equal((await call(`${m.url}${TOOLS}/${tool.id}`, { key: b, method: 'DELETE' })).status, 404)
  t.equal((await call(`${m.url}${TOOLS}/${tool.id}`, { key: b, method: 'PUT', body: { name: 'x' } })).status, 404)
  t.equal((await call(`${m.url}${TOOLS}?format=array`, { key: b })).body.length, 0)
  const claimed = await call(`${m.url}${TOOLS}`, { key: b, body: valid() })
  t.equal(claimed.status, 403, "a body naming another team's teamId is refused (docs/tools.md)")
  t.match(claimed.body.error, { type: 'permission_error', code: 'team_mismatch', param: 'teamId' })
  t.equal((await call(`${m.url}${TOOLS}`, { key: b, body: { ...valid(), teamId: 'team-b' } })).status, 201, 'the same toolId is free in another team')
  t.equal((await call(`${m.url}${TOOLS}?teamId=team-b`, { key: a })).status, 403, 'teamId must be the key team')
  t.equal((await call(`${m.url}${TOOLS}/${tool.id}`, { key: readOnly })).status, 200, 'platform:read reads')
  t.equal((await call(`${m.url}${TOOLS}`, { key: readOnly, body: valid() })).status, 403, 'platform:read cannot write')
  const meteringOnly = await m.key({ team: 'team-a', scopes: ['metering:write'] })
  t.equal((await call(`${m.url}${TOOLS}`, { key: meteringOnly })).status, 403)
  // Events are priced by the registry of the key's own team.
  const evB = await postEvent(m, b, event('experian-credit-check'))
  t.equal(evB.cost.source, 'registry')
  const c = await m.key({ team: 'team-c', account: 'acct-3' })
  t.equal((await postEvent(m, c, event('experian-credit-check'))).cost.source, 'unpriced', "team-c cannot use team-a's tool")
})

t.test('Enabled state machine: disabled → 201, not priced, not counted; enabled → resumes', async (t) => {
  const m = await startPricing(t)
  const key = await m.key()
  const tool = await createTool(m, key, toolBody('sw', { name: 'requests', aggregationType: 'COUNT', tiers: [{ upTo: 1, unitPrice: 1 }, { upTo: null, unitPrice: 0.5 }] }))
  t.equal((await postEvent(m, key, event('sw'))).cost.total, '1')
  const off = await call(`${m.url}${TOOLS}/${tool.id}`, { key, method: 'PUT', body: { enabled: false } })
  t.equal(off.body.enabled, false)
  const during = await postEvent(m, key, event('sw'))
  t.same([during.cost.source, during.cost.total, during.cost.metered, during.cost.note], ['skipped', '0', false, 'tool_disabled'])
  await call(`${m.url}${TOOLS}/${tool.id}`, { key, method: 'PUT', body: { enabled: true } })
  // Had the disabled event counted, this would be the third (C(3) − C(2) = 0.5); it is the second.
  t.equal((await postEvent(m, key, event('sw'))).cost.total, '0', 'C(2) − C(1): the disabled event was not counted')
})

t.test('PUT: a field sent as null keeps its value (a disabled tool stays disabled, its prices stay), and provider changes toolProvider as it sets it at creation', async (t) => {
  const m = await startPricing(t)
  const key = await m.key()
  const tool = await createTool(m, key, toolBody('keep', { name: 'requests', unitPrice: '0.5', aggregationType: 'COUNT' }, { provider: 'acme', description: 'd', enabled: false }))
  t.equal(tool.toolProvider, 'acme', 'provider is toolProvider at creation')
  // What Python's None and Go's nil pointers send for a field the caller did not set.
  const nulls = await call(`${m.url}${TOOLS}/${tool.id}`, { key, method: 'PUT', body: { enabled: null, pricing: null, description: null, toolProvider: null, name: 'Kept' } })
  t.equal(nulls.status, 200)
  t.match(nulls.body, { name: 'Kept', enabled: false, description: 'd', toolProvider: 'acme' }, 'null is absent: the disabled tool is not enabled by it')
  t.same(nulls.body.pricing.elements.map((e: any) => [e.name, e.unitPrice]), [['requests', 0.5]], 'and its prices are not wiped')
  const during = await postEvent(m, key, event('keep'))
  t.same([during.cost.source, during.cost.total], ['skipped', '0'], 'still disabled: not metered')

  const renamed = await call(`${m.url}${TOOLS}/${tool.id}`, { key, method: 'PUT', body: { provider: 'newvendor' } })
  t.equal(renamed.status, 200)
  t.equal(renamed.body.toolProvider, 'newvendor', 'a 200 to provider changed it')
  t.equal((await call(`${m.url}${TOOLS}/${tool.id}`, { key })).body.toolProvider, 'newvendor', 'and stored it')
  const both = await call(`${m.url}${TOOLS}/${tool.id}`, { key, method: 'PUT', body: { provider: 'x', toolProvider: 'y' } })
  t.equal(both.body.toolProvider, 'y', 'toolProvider wins over provider, as at creation')

  const on = await call(`${m.url}${TOOLS}/${tool.id}`, { key, method: 'PUT', body: { enabled: true } })
  t.equal(on.body.enabled, true, 'enabled: true still enables')
  t.equal((await postEvent(m, key, event('keep'))).cost.total, '0.5')
})

t.test('a quantity past 10^15 for a priced element is a 400 naming it; nothing is stored or counted', async (t) => {
  const m = await startPricing(t)
  const key = await m.key()
  await createTool(m, key, toolBody('q', { name: 'bytes', aggregationType: 'SUM', unitPrice: 1 }))
  for (const [what, bytes] of [['1e300', 1e300], ['1e16', 1e16], ['a numeric string past it', '1000000000000000.5'], ['one in exponent form', '1e30']] as const) {
    const res = await call(`${m.url}/meter/v2/tool/events`, { key, body: event('q', { usageMetadata: { bytes } }) })
    t.equal(res.status, 400, `${what}: 400`)
    t.match(res.body.error, { type: 'invalid_request_error', code: 'invalid_field', param: 'usageMetadata.bytes', message: /at most 1000000000000000/ }, what)
  }
  const batch = await call(`${m.url}/meter/v2/tool/events`, { key, body: [event('q', { usageMetadata: { bytes: 1 } }), event('q', { usageMetadata: { bytes: 1e20 } })] })
  t.match(batch.body.error, { code: 'invalid_field', param: '[1].usageMetadata.bytes' }, 'in a batch, with its index')
  const stored = await call(`${m.url}/profitstream/v2/api/sources/metrics/tool/events`, { key })
  t.equal(stored.body.page.totalElements, 0, 'nothing stored, the good event of the batch neither')
  // The period moved by none of them: the next event's cost is its own quantity's.
  t.equal((await postEvent(m, key, event('q', { usageMetadata: { bytes: 1e15 } }))).cost.total, '1000000000000000', 'the bound itself is taken')
  t.equal((await postEvent(m, key, event('q', { usageMetadata: { bytes: 2 } }))).cost.total, '2', 'and the period sum stays exact after it')
  const other = await postEvent(m, key, event('q', { usageMetadata: { bytes: 1, unrelated: 1e300 } }))
  t.equal(other.cost.total, '1', 'a value no element counts may be as large as it likes')
})

t.test('tools declared in YAML: configSource YAML, PUT makes MERGED, DELETE refused', async (t) => {
  const m = await startPricing(t, {
    extensions: {
      tools: { tools: [{ toolId: 'web-search', name: 'Web search', toolType: 'AI_SERVICE', pricing: { elements: [{ name: 'results', aggregationType: 'SUM', unitPrice: '0.002' }] } }] },
    },
  })
  const key = await m.key()
  const yaml = await call(`${m.url}${TOOLS}/by-tool-id/web-search`, { key })
  t.match(yaml.body, { id: 'yaml-web-search', configSource: 'YAML', teamId: 'team-a' })
  t.equal((await postEvent(m, key, event('web-search', { usageMetadata: { results: 3 } }))).cost.total, '0.006')
  t.equal((await call(`${m.url}${TOOLS}`, { key, body: toolBody('web-search', { name: 'n', aggregationType: 'COUNT', unitPrice: 1 }) })).status, 409)
  const merged = await call(`${m.url}${TOOLS}/yaml-web-search`, { key, method: 'PUT', body: { pricing: { elements: [{ name: 'results', aggregationType: 'SUM', unitPrice: '0.01' }] } } })
  t.match(merged.body, { configSource: 'MERGED', name: 'Web search' })
  t.equal((await postEvent(m, key, event('web-search', { usageMetadata: { results: 3 } }))).cost.total, '0.03', 'the overlay prices')
  t.equal((await call(`${m.url}${TOOLS}/yaml-web-search`, { key, method: 'DELETE' })).status, 409)
  const other = await m.key({ team: 'team-z', account: 'acct-z' })
  t.equal((await call(`${m.url}${TOOLS}/by-tool-id/web-search`, { key: other })).body.configSource, 'YAML', "another team still sees the YAML tool, not team-a's overlay")
})
