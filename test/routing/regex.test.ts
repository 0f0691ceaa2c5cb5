import t from 'tap'
import { FACTORIES } from '../../src/components.js'
import { DEFAULT_CONFIG_PATH } from '../../src/core/config/load.js'
import { factoryMap } from '../../src/host/graph.js'
import { resolveConfig } from '../../src/host/resolve.js'
import { completion } from '../fixtures/wire-examples.js'
import { call, startMeterd, tempDir, writeConfig } from '../helpers/meterd.js'

const LIST = '/profitstream/v2/api/sources/metrics/ai/completions?size=1000'

const pipelines = (table: unknown[]) => ({
  connectors: { routing: { table, default_pipelines: ['usage/main'] } },
  processors: { 'filter/none': { drop: 'true' } },
  exporters: { debug: {} },
  service: {
    pipelines: {
      usage: { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'], exporters: ['routing'] },
      'usage/main': { receivers: ['routing'], exporters: ['lmdb'] },
      'usage/discard': { receivers: ['routing'], processors: ['filter/none'], exporters: ['debug'] },
    },
  },
})

// A backtracking engine (JavaScript's RegExp) needs about 2^n steps for these against n hostile
// characters: with it, the daemon's event loop never comes back and this test times out.
t.test('a backtracking pattern against a hostile value: both requests are answered, the other client meanwhile', async (t) => {
  const m = await startMeterd(t, {
    config: pipelines([
      { condition: 'model =~ "(a+)+$"', pipelines: ['usage/discard'] },
      { condition: 'subscriber.id =~ "^(x|x)*y$"', pipelines: ['usage/discard'] },
    ]),
  })
  const key = await m.key()
  const hostile = completion({ model: 'a'.repeat(60) + '!', subscriber: { id: 'x'.repeat(60) } })
  const other = completion({ model: 'gpt-4o' })
  const matching = completion({ model: 'llama-aaa' })
  // Two connections: the hostile request is sent first, the other client's while it is processed.
  const first = call(`${m.url}/meter/v2/ai/completions`, { key, body: hostile })
  const second = call(`${m.url}/meter/v2/ai/completions`, { key, body: [other, matching] })
  const [a, b] = await Promise.all([first, second])
  t.equal(a.status, 201, a.text)
  t.equal(b.status, 201, b.text)
  const stored = (await call(m.url + LIST, { key })).body._embedded.aICompletionMetricResourceList as any[]
  t.same(stored.map((r) => r.model).sort(), ['a'.repeat(60) + '!', 'gpt-4o'].sort(), 'neither pattern matched the hostile record; "llama-aaa" matched (a+)+$ and was routed away')
})

t.test('backreferences and lookaround are refused at config load, with the column', async (t) => {
  const cases: [string, RegExp][] = [
    ['model =~ "(a)\\\\1"', /column 10: bad regular expression: backreferences \(\\1\) are not supported: conditions use RE2 syntax/],
    ['model =~ "^gpt(?=-4)"', /column 10: bad regular expression: lookahead and lookbehind \(\(\?=\) are not supported/],
    ['model !~ "(?<!x)y"', /column 10: bad regular expression: lookahead and lookbehind \(\(\?<!\) are not supported/],
    ['model =~ "("', /column 10: bad regular expression: missing closing \): `\(`/],
  ]
  for (const [condition, message] of cases) {
    const file = writeConfig(tempDir(), pipelines([{ condition, pipelines: ['usage/discard'] }]))
    const { issues } = resolveConfig([DEFAULT_CONFIG_PATH, file], factoryMap(FACTORIES), {})
    const hit = issues.find((i) => i.path === 'connectors.routing.table[0].condition')
    t.ok(hit, `${condition}: reported (got ${JSON.stringify(issues)})`)
    if (hit) t.match(hit.message, message, condition)
  }
})
