import fc from 'fast-check'
import t from 'tap'
import { Decimal } from '../../src/domain/pricing/money.js'
import { ConditionError, compileCondition, compileNode, parseCondition, usageFields, type Node, type Literal } from '../../src/domain/conditions/index.js'
import type { FieldCatalog } from '../../src/domain/conditions/index.js'
import { EMPTY_ATTRIBUTION, type UsageRecord } from '../../src/model/usage-record.js'

/** A priced completion record as the pipeline holds it after validate, attribution and pricing. */
function record(over: { body?: Record<string, unknown>; attribution?: Partial<UsageRecord['attribution']>; cost?: string | null; team?: string; kind?: UsageRecord['kind'] } = {}): UsageRecord {
  return {
    id: 'r1',
    kind: over.kind ?? 'completion',
    eventTime: '2026-11-21T00:00:00.000Z',
    receivedAt: '2026-11-21T00:00:01.000Z',
    caller: { account: 'acct', tenant: 'ten', team: over.team ?? 'team-a', environment: 'prod', keyId: 'k' },
    attribution: { ...EMPTY_ATTRIBUTION, ...(over.attribution ?? {}) },
    attributed: true,
    cost: over.cost === null ? undefined : { currency: 'USD', total: over.cost ?? '0.000125', parts: { input: '0.0001', output: '0.000025' }, source: 'pricebook' },
    body: { model: 'gpt-4o', provider: 'OpenAI', inputTokenCount: 40, outputTokenCount: 10, totalTokenCount: 50, stopReason: 'END', isStreamed: false, attributes: { tier: 'gold', score: 7 }, ...(over.body ?? {}) },
  } as UsageRecord
}

const acme = record({ attribution: { organizationName: 'AcmeOrg', environment: 'prod' }, body: { organizationName: 'AcmeOrg' } })
const test = record({ attribution: { organizationName: 'Beta', environment: 'test', subscriberEmail: 'ana@x.io' }, cost: '0', body: { model: 'claude-3-haiku', provider: 'anthropic', inputTokenCount: 3000, subscriber: { email: 'Ana@x.io' } } })
const tool = record({ kind: 'tool', cost: null, team: 'team-b', body: { toolId: 'search', isStreamed: undefined, model: undefined, provider: undefined, inputTokenCount: undefined, attributes: undefined } })
const records = { acme, test, tool }

// [condition, which of acme / test / tool meet it]
const TABLE: [string, string[]][] = [
  ['organizationName == "AcmeOrg"', ['acme']],
  ['organizationName != "AcmeOrg"', ['test', 'tool']],
  ['environment in ["test", "dev"]', ['test']],
  ['environment not in ["test", "dev"]', ['acme', 'tool']],
  ['kind == "tool"', ['tool']],
  ['team == "team-b"', ['tool']],
  ['provider == "openai"', ['acme'], ],
  ['provider == "OPENAI"', ['acme']],
  ['provider in ["Anthropic"]', ['test']],
  ['model =~ "^gpt-"', ['acme']],
  ['model !~ "^gpt-"', ['test', 'tool']],
  ['provider =~ "^open"', ['acme']],
  ['provider =~ "^OPEN"', ['acme']],
  ['model =~ "(?i)^GPT-\\\\d"', ['acme']],
  ['model =~ "^(gpt|claude)-[0-9]"', ['acme', 'test']],
  ['model =~ "(a+)+$"', []],
  ['cost.total > 0', ['acme']],
  ['cost.total >= 0', ['acme', 'test']],
  ['cost.total == 0.000125', ['acme']],
  ['cost.total == 0.0001250', ['acme']],
  ['cost.total < 0.000125', ['test']],
  ['cost.total <= 0.000125', ['acme', 'test']],
  ['cost.parts.input > 0.00009', ['acme', 'test']],
  ['cost.total exists', ['acme', 'test']],
  ['not cost.total exists', ['tool']],
  ['inputTokenCount > 1000', ['test']],
  ['inputTokenCount <= 40', ['acme']],
  ['inputTokenCount == 40', ['acme']],
  ['inputTokenCount in [40, 3000]', ['acme', 'test']],
  ['isStreamed == false', ['acme', 'test']],
  ['subscriber.email == "ana@x.io"', ['test']],
  ['subscriber.email exists', ['test']],
  ['attributes.tier == "gold"', ['acme', 'test']],
  ['attributes.score > 5', ['acme', 'test']],
  ['attributes.score == 7', ['acme', 'test']],
  ['attributes.score == "7"', []],
  ['body.toolId == "search"', ['tool']],
  ['toolId exists', ['tool']],
  ['true', ['acme', 'test', 'tool']],
  ['false', []],
  // precedence: and binds tighter than or; not tighter than and
  ['kind == "tool" or organizationName == "AcmeOrg" and cost.total > 1', ['tool']],
  ['(kind == "tool" or organizationName == "AcmeOrg") and cost.total > 0', ['acme']],
  ['not kind == "tool" and cost.total == 0', ['test']],
  ['not (kind == "tool" and cost.total == 0)', ['acme', 'test', 'tool']],
  ['not not organizationName == "AcmeOrg"', ['acme']],
  ['environment == "test" or environment == "dev" or kind == "tool"', ['test', 'tool']],
  ['((environment == "prod"))', ['acme']],
  ["organizationName == 'Beta' and model == 'claude-3-haiku'", ['test']],
]

t.test('every operator and combination against a table of records', async (t) => {
  for (const [src, want] of TABLE) {
    const p = compileCondition(src, usageFields)
    const got = Object.entries(records).filter(([, r]) => p(r)).map(([k]) => k)
    t.same(got, want, src)
  }
})

t.test('bad conditions are errors with the column, never a runtime surprise', async (t) => {
  const bad: [string, RegExp, number][] = [
    ['model > 3', /model is a string: > compares numbers/, 1],
    ['inputTokenCount == "40"', /inputTokenCount is a number, it cannot equal the string "40"/, 20],
    ['cost.total > "1"', /compares numbers/, 14],
    ['colour == "red"', /unknown field "colour"/, 1],
    ['organizationName = "x"', /compare with ==/, 18],
    ['organizationName == "x" && kind == "tool"', /combine with and, or/, 25],
    ['organizationName == "x', /unterminated string/, 21],
    ['(kind == "tool"', /expected "\)", found the end/, 16],
    ['kind == "tool")', /expected "and", "or" or the end/, 15],
    ['kind in "tool"', /"\[" after in/, 9],
    ['kind in ["a" "b"]', /"," or "\]"/, 14],
    ['model =~ "("', /bad regular expression/, 10],
    ['kind == "tool" or model =~ "\\\\u0041"', /bad regular expression: invalid escape sequence: `\\u`/, 28],
    ['inputTokenCount =~ "4"', /inputTokenCount is a number: =~/, 1],
    ['kind', /an operator after kind/, 5],
    ['', /empty/, 1],
    ['isStreamed > 1', /isStreamed is a boolean/, 1],
    ['environment in ["test", 3]', /environment is a string, it cannot equal the number 3/, 25],
    ['body.__proto__ exists', /not a field name/, 1],
    ['attributes exists', /attributes is an object/, 1],
  ]
  for (const [src, message, column] of bad) {
    try {
      compileCondition(src, usageFields)
      t.fail(`${src} compiled`)
    } catch (err) {
      t.ok(err instanceof ConditionError, src)
      t.match((err as ConditionError).reason, message, src)
      t.equal((err as ConditionError).column, column, `${src}: column`)
    }
  }
})

// ---------------------------------------------------------------- property: compiled == interpreted

/** A reference interpreter: walks the tree on every call, with the documented semantics spelled out plainly. */
function interpret(n: Node, r: unknown, fields: FieldCatalog): boolean {
  switch (n.op) {
    case 'const': return n.value
    case 'not': return !interpret(n.operand, r, fields)
    case 'and': return interpret(n.left, r, fields) ? interpret(n.right, r, fields) : false
    case 'or': return interpret(n.left, r, fields) ? true : interpret(n.right, r, fields)
    case 'exists': return get(fields, n.field, r) !== undefined
    case 'match': {
      const f = fields.resolve(n.field) as any
      const v = f.get(r)
      // JavaScript's RegExp, not RE2: the generated patterns mean the same in both, so this also
      // checks that the RE2 matcher agrees with the engine operators know.
      const hit = typeof v === 'string' && new RegExp(n.pattern, f.lower ? 'i' : '').test(v)
      return n.negated ? !hit : hit
    }
    case 'in': {
      const hit = n.values.some((l) => equal(fields, n.field, r, l))
      return n.negated ? !hit : hit
    }
    case 'compare': {
      const v = get(fields, n.field, r)
      if (n.cmp === '==') return equal(fields, n.field, r, n.value)
      if (n.cmp === '!=') return !equal(fields, n.field, r, n.value)
      if (v === undefined || n.value.type !== 'number') return false
      let c: number
      if (typeof v === 'number') c = new Decimal(v).cmp(new Decimal(n.value.text))
      else if (typeof v === 'string' && /^-?\d+(\.\d+)?$/.test(v)) c = new Decimal(v).cmp(new Decimal(n.value.text))
      else return false
      return n.cmp === '<' ? c < 0 : n.cmp === '<=' ? c <= 0 : n.cmp === '>' ? c > 0 : c >= 0
    }
  }
}
function get(fields: FieldCatalog, path: string, r: unknown): unknown {
  return (fields.resolve(path) as any).get(r)
}
function equal(fields: FieldCatalog, path: string, r: unknown, l: Literal): boolean {
  const f = fields.resolve(path) as any
  const v = f.get(r)
  if (v === undefined) return false
  if (l.type === 'string') return v === (f.lower ? l.value.toLowerCase() : l.value)
  if (l.type === 'boolean') return v === l.value
  if (typeof v === 'number') return new Decimal(v).eq(new Decimal(l.text))
  return typeof v === 'string' && /^-?\d+(\.\d+)?$/.test(v) && new Decimal(v).eq(new Decimal(l.text))
}

/** Prints a tree back as a condition (fully parenthesised), so the property covers the parser too. */
function print(n: Node): string {
  const lit = (l: Literal): string => (l.type === 'string' ? JSON.stringify(l.value) : l.type === 'number' ? l.text : String(l.value))
  switch (n.op) {
    case 'const': return String(n.value)
    case 'not': return `not (${print(n.operand)})`
    case 'and':
    case 'or': return `(${print(n.left)}) ${n.op} (${print(n.right)})`
    case 'exists': return `${n.field} exists`
    case 'match': return `${n.field} ${n.negated ? '!~' : '=~'} ${JSON.stringify(n.pattern)}`
    case 'in': return `${n.field} ${n.negated ? 'not in' : 'in'} [${n.values.map(lit).join(', ')}]`
    case 'compare': return `${n.field} ${n.cmp} ${lit(n.value)}`
  }
}

const STRING_FIELDS = ['organizationName', 'environment', 'model', 'provider', 'kind', 'team']
const NUMBER_FIELDS = ['inputTokenCount', 'outputTokenCount', 'cost.total', 'attributes.score']
const words = fc.constantFrom('AcmeOrg', 'Beta', 'test', 'dev', 'prod', 'gpt-4o', 'OpenAI', 'openai', 'completion', 'tool', 'team-a', '')
const numText = fc.oneof(fc.integer({ min: -5, max: 5000 }).map(String), fc.constantFrom('0.000125', '0.5', '0.0001', '1e-4', '40.0'))
const strLit = words.map((value): Literal => ({ type: 'string', value }))
const numLit = numText.map((text): Literal => ({ type: 'number', text }))
const at = { at: 0 }

const leaf: fc.Arbitrary<Node> = fc.oneof(
  fc.record({ field: fc.constantFrom(...STRING_FIELDS), cmp: fc.constantFrom('==' as const, '!=' as const), value: strLit }).map((x): Node => ({ op: 'compare', ...x, ...at, valueAt: 0 })),
  fc.record({ field: fc.constantFrom(...NUMBER_FIELDS), cmp: fc.constantFrom('==', '!=', '<', '<=', '>', '>=' as const), value: numLit }).map((x): Node => ({ op: 'compare', field: x.field, cmp: x.cmp as any, value: x.value, ...at, valueAt: 0 })),
  fc.record({ field: fc.constantFrom(...STRING_FIELDS), values: fc.array(strLit, { minLength: 1, maxLength: 3 }), negated: fc.boolean() }).map((x): Node => ({ op: 'in', ...x, ...at, valuesAt: x.values.map(() => 0) })),
  fc.record({ field: fc.constantFrom(...NUMBER_FIELDS), values: fc.array(numLit, { minLength: 1, maxLength: 3 }), negated: fc.boolean() }).map((x): Node => ({ op: 'in', ...x, ...at, valuesAt: x.values.map(() => 0) })),
  fc.record({ field: fc.constantFrom(...STRING_FIELDS), pattern: fc.constantFrom('^gpt', 'org$', 'e', '^$', 'A.*O'), negated: fc.boolean() }).map((x): Node => ({ op: 'match', ...x, ...at, patternAt: 0 })),
  fc.constantFrom(...STRING_FIELDS, ...NUMBER_FIELDS, 'subscriber.email').map((field): Node => ({ op: 'exists', field, ...at })),
  fc.boolean().map((value): Node => ({ op: 'const', value })),
)
const tree = fc.letrec<{ node: Node }>((tie) => ({
  node: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    leaf,
    tie('node').map((operand): Node => ({ op: 'not', operand })),
    fc.record({ op: fc.constantFrom('and' as const, 'or' as const), left: tie('node'), right: tie('node') }) as fc.Arbitrary<Node>,
  ),
})).node

const maybe = <T>(a: fc.Arbitrary<T>) => fc.option(a, { nil: undefined })
const randomRecord = fc
  .record({
    org: maybe(words),
    env: maybe(words),
    model: maybe(words),
    provider: maybe(words),
    kind: fc.constantFrom('completion' as const, 'tool' as const),
    team: words,
    input: maybe(fc.integer({ min: 0, max: 6000 })),
    output: maybe(fc.integer({ min: 0, max: 100 })),
    cost: maybe(numText.filter((s) => /^-?\d+(\.\d+)?$/.test(s))),
    score: maybe(fc.oneof(fc.integer({ min: -3, max: 50 }), fc.constant('7'), fc.constant(0.5))),
    email: maybe(words),
  })
  .map((x) =>
    record({
      kind: x.kind,
      team: x.team,
      cost: x.cost ?? null,
      attribution: { organizationName: x.org ?? '', environment: x.env ?? '' },
      body: { model: x.model, provider: x.provider, inputTokenCount: x.input, outputTokenCount: x.output, attributes: { score: x.score }, subscriber: x.email === undefined ? undefined : { email: x.email } },
    }),
  )

t.test('property: a compiled condition agrees with the reference interpreter on random records', async (t) => {
  let checked = 0
  fc.assert(
    fc.property(tree, fc.array(randomRecord, { minLength: 1, maxLength: 8 }), (node, recs) => {
      const source = print(node)
      const reparsed = parseCondition(source)
      const compiled = compileCondition(source, usageFields)
      const direct = compileNode(node, usageFields)
      for (const r of recs) {
        const want = interpret(node, r, usageFields)
        if (compiled(r) !== want || direct(r) !== want || interpret(reparsed, r, usageFields) !== want) throw new Error(`${source}: compiled ${compiled(r)}, interpreted ${want}`)
        checked++
      }
    }),
    { numRuns: 1500, seed: 20261125 },
  )
  t.ok(checked > 1500, `${checked} evaluations agreed`)
})

t.test('property: decimal strings compare exactly, as decimal.js does', async (t) => {
  const digits = (max: number) => fc.array(fc.constantFrom(...'0123456789'), { minLength: 1, maxLength: max }).map((d) => d.join(''))
  const decimal = fc.record({ neg: fc.boolean(), int: digits(25), frac: fc.option(digits(20), { nil: undefined }) }).map(({ neg, int, frac }) => `${neg ? '-' : ''}${int}${frac === undefined ? '' : '.' + frac}`)
  const { compileCondition: compile } = await import('../../src/domain/conditions/index.js')
  fc.assert(
    fc.property(decimal, decimal, (a, b) => {
      const want = new Decimal(a).cmp(new Decimal(b))
      const r = record({ cost: a })
      const got = { '<': want < 0, '<=': want <= 0, '==': want === 0, '>': want > 0, '>=': want >= 0, '!=': want !== 0 }
      for (const [op, expected] of Object.entries(got)) if (compile(`cost.total ${op} ${b}`, usageFields)(r) !== expected) throw new Error(`${a} ${op} ${b}: wanted ${expected}`)
    }),
    { numRuns: 3000, seed: 7 },
  )
  t.equal(compileCondition('cost.total > 0', usageFields)(record({ cost: '1e-3' })), false, 'a cost that is not a plain decimal string is not comparable')
  t.equal(compileCondition('cost.total == 0', usageFields)(record({ cost: '-0.000' })), true, '-0.000 equals 0')
})
