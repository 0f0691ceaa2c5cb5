import t from 'tap'
import { judge, matchesFilters, measure, nearestRank, periodStart, windowsOf } from '../../src/domain/alerts/measure.js'
import { parseRule } from '../../src/domain/alerts/parse.js'
import { EMPTY_ATTRIBUTION, type UsageRecord } from '../../src/model/usage-record.js'
import { Decimal } from '../../src/domain/pricing/money.js'

const caller = { account: 'a', tenant: 't', team: 'team-a', environment: 'production', keyId: 'k' }

function completion(over: { cost?: string; input?: number; output?: number; total?: number | null; duration?: number; stop?: string; model?: string; provider?: string; trace?: string; org?: string; email?: string; errorReason?: string } = {}): UsageRecord {
  return {
    id: 'c' + Math.random(),
    kind: 'completion',
    eventTime: '2025-06-01T00:00:00.000Z',
    receivedAt: '2025-06-01T00:00:00.000Z',
    caller,
    attribution: { ...EMPTY_ATTRIBUTION, traceId: over.trace ?? '', organizationName: over.org ?? '', subscriberEmail: over.email ?? '' },
    attributed: false,
    cost: { currency: 'USD', total: over.cost ?? '0', parts: {}, source: 'client' },
    body: {
      model: over.model ?? 'gpt-4o',
      provider: over.provider ?? 'OpenAI',
      inputTokenCount: over.input ?? 0,
      outputTokenCount: over.output ?? 0,
      totalTokenCount: over.total === undefined ? (over.input ?? 0) + (over.output ?? 0) : over.total,
      stopReason: over.stop ?? 'END',
      requestTime: '2025-06-01T00:00:00.000Z',
      completionStartTime: '2025-06-01T00:00:00.000Z',
      responseTime: '2025-06-01T00:00:00.000Z',
      requestDuration: over.duration ?? 10,
      ...(over.errorReason ? { errorReason: over.errorReason } : {}),
    },
  }
}

function tool(over: { cost?: string; success?: boolean; trace?: string; toolId?: string } = {}): UsageRecord {
  return {
    id: 't' + Math.random(),
    kind: 'tool',
    eventTime: '2025-06-01T00:00:00.000Z',
    receivedAt: '2025-06-01T00:00:00.000Z',
    caller,
    attribution: { ...EMPTY_ATTRIBUTION, traceId: over.trace ?? '' },
    attributed: false,
    cost: { currency: 'USD', total: over.cost ?? '0', parts: {}, source: 'registry' },
    body: { toolId: over.toolId ?? 'web-search', timestamp: '2025-06-01T00:00:00.000Z', success: over.success ?? true },
  }
}

const W = { from: 0, to: 10 * 60_000 } // ten minutes
const str = (d: Decimal | null) => (d === null ? null : d.toString())

t.test('money metrics are exact decimal sums, never float sums', async (t) => {
  const rs = [completion({ cost: '0.1' }), completion({ cost: '0.2' }), tool({ cost: '0.000000000001' })]
  t.equal(str(measure('TOTAL_COST', rs, W)), '0.300000000001', '0.1 + 0.2 is 0.3 here')
  t.equal(str(measure('COST_PER_TRANSACTION', rs, W)), '0.1', '0.100000000000333… rounded half-even to 12 places')
  t.equal(measure('COST_PER_TRANSACTION', [], W), null, 'no transactions: no cost per transaction')
  t.equal(str(measure('TOTAL_COST', [], W)), '0')
})

t.test('tokens, rates, errors and latency', async (t) => {
  const rs = [
    completion({ input: 100, output: 20, duration: 100 }),
    completion({ input: 50, output: 5, total: 40, duration: 300 }), // the client's own total is kept
    completion({ stop: 'ERROR', duration: 200 }),
    completion({ errorReason: 'upstream 500', duration: 400 }),
    tool({ success: false }),
  ]
  t.equal(str(measure('INPUT_TOKENS', rs, W)), '150')
  t.equal(str(measure('OUTPUT_TOKENS', rs, W)), '25')
  t.equal(str(measure('TOKEN_COUNT', rs, W)), '160', 'totalTokenCount as sent (120 + 40)')
  t.equal(str(measure('TOKENS_PER_MINUTE', rs, W)), '16', '160 tokens over ten minutes')
  t.equal(str(measure('REQUESTS_PER_MINUTE', rs, W)), '0.5')
  t.equal(str(measure('ERROR_COUNT', rs, W)), '3', 'stopReason ERROR, an errorReason, a failed tool call')
  t.equal(str(measure('ERROR_RATE', rs, W)), '60', 'in percent')
  t.equal(str(measure('LATENCY_P95', rs, W)), '400', 'nearest rank over completions only')
  t.equal(measure('LATENCY_P95', [tool()], W), null)
})

t.test('nearest rank: the smallest value with at least p % at or below it', async (t) => {
  const v = Array.from({ length: 20 }, (_, i) => i + 1)
  t.equal(nearestRank(v, 95), 19, 'rank ceil(0.95 × 20) = 19')
  t.equal(nearestRank(v, 100), 20)
  t.equal(nearestRank([7], 95), 7)
  t.equal(nearestRank(Array.from({ length: 21 }, (_, i) => i + 1), 95), 20, 'rank ceil(19.95) = 20')
})

t.test('TRACE_COST is the costliest trace, its completions and tool events together', async (t) => {
  const rs = [completion({ trace: 'a', cost: '1' }), tool({ trace: 'a', cost: '0.5' }), completion({ trace: 'b', cost: '1.25' }), completion({ cost: '9' })]
  t.equal(str(measure('TRACE_COST', rs, W)), '1.5', 'records without a trace are in no trace')
  t.equal(measure('TRACE_COST', [completion()], W), null)
})

t.test('filters: every row must hold; operators ignore case; SUBSCRIBER matches id or e-mail', async (t) => {
  const rule = (filters: unknown) => parseRule({ name: 'r', alertType: 'THRESHOLD', metricType: 'TOTAL_COST', operatorType: 'GREATER_THAN', threshold: 1, periodDuration: 'DAILY', filters })
  const r = completion({ model: 'GPT-4o-mini', provider: 'OpenAI', org: 'AcmeOrg', email: 'ann@example.com' })
  const cases: [unknown, boolean][] = [
    [[{ dimension: 'MODEL', operator: 'IS', value: 'gpt-4o-mini' }], true],
    [[{ dimension: 'MODEL', operator: 'EQUALS', value: 'gpt-4o' }], false],
    [[{ dimension: 'MODEL', operator: 'STARTS_WITH', value: 'gpt-4' }], true],
    [[{ dimension: 'MODEL', operator: 'ENDS_WITH', value: 'MINI' }], true],
    [[{ dimension: 'PROVIDER', operator: 'CONTAINS', value: 'pena' }], true],
    [[{ dimension: 'PROVIDER', operator: 'IS_NOT', value: 'openai' }], false],
    [[{ dimension: 'ORGANIZATION', operator: 'IN', values: ['Other', 'acmeorg'] }], true],
    [[{ dimension: 'SUBSCRIBER', operator: 'IS', value: 'ann@example.com' }], true],
    [[{ dimension: 'MODEL', operator: 'IS', value: 'gpt-4o-mini' }, { dimension: 'ORGANIZATION', operator: 'IS', value: 'nope' }], false],
    [[{ dimension: 'TOOL', operator: 'IS', value: 'web-search' }], false],
  ]
  for (const [filters, want] of cases) t.equal(matchesFilters(r, rule(filters).filters), want, JSON.stringify(filters))
  t.ok(matchesFilters(tool(), rule([{ dimension: 'TOOL', operator: 'IS', value: 'web-search' }]).filters))
})

t.test('windows: sliding for THRESHOLD and RELATIVE_CHANGE, the calendar period so far for CUMULATIVE_USAGE', async (t) => {
  const now = Date.parse('2026-11-25T13:45:10.000Z') // a Wednesday
  t.same(windowsOf({ alertType: 'THRESHOLD', periodDuration: 'DAILY', windowSeconds: null }, now), { current: { from: now - 86_400_000, to: now } })
  t.same(windowsOf({ alertType: 'THRESHOLD', periodDuration: 'DAILY', windowSeconds: 300 }, now), { current: { from: now - 300_000, to: now } })
  t.same(windowsOf({ alertType: 'RELATIVE_CHANGE', periodDuration: 'ONE_HOUR', windowSeconds: null }, now), {
    current: { from: now - 3_600_000, to: now },
    previous: { from: now - 7_200_000, to: now - 3_600_000 },
  })
  const start = (p: any) => new Date(periodStart(p, now)).toISOString()
  t.equal(start('ONE_HOUR'), '2026-11-25T13:00:00.000Z')
  t.equal(start('DAILY'), '2026-11-25T00:00:00.000Z')
  t.equal(start('WEEKLY'), '2026-11-23T00:00:00.000Z', 'ISO weeks start on Monday')
  t.equal(start('MONTHLY'), '2026-11-01T00:00:00.000Z')
  t.equal(start('QUARTERLY'), '2026-10-01T00:00:00.000Z')
  t.equal(new Date(periodStart('WEEKLY', Date.parse('2026-11-29T23:00:00Z'))).toISOString(), '2026-11-23T00:00:00.000Z', 'a Sunday belongs to the week of the Monday before')
})

t.test('judge: comparisons, change operators, and nothing to compare', async (t) => {
  const d = (v: string) => new Decimal(v)
  const rule = (alertType: any, operatorType: any, threshold: string) => ({ alertType, operatorType, threshold })
  t.same(judge(rule('THRESHOLD', 'GREATER_THAN', '10'), d('10')).holds, false)
  t.same(judge(rule('THRESHOLD', 'GREATER_THAN_OR_EQUAL', '10'), d('10')).holds, true)
  t.same(judge(rule('THRESHOLD', 'LESS_THAN', '10'), d('9.999')).holds, true)
  t.same(judge(rule('CUMULATIVE_USAGE', 'LESS_THAN_OR_EQUAL', '10'), d('10.0000001')).holds, false)
  t.same(judge(rule('THRESHOLD', 'GREATER_THAN', '10'), null), { value: null, holds: null })
  const inc = judge(rule('RELATIVE_CHANGE', 'PERCENT_INCREASE', '50'), d('15'), d('10'))
  t.same([inc.value!.toString(), inc.holds], ['50', true])
  const dec = judge(rule('RELATIVE_CHANGE', 'PERCENT_DECREASE', '50'), d('6'), d('10'))
  t.same([dec.value!.toString(), dec.holds], ['40', false])
  t.same(judge(rule('RELATIVE_CHANGE', 'INCREASES_BY', '5'), d('15'), d('10')).holds, true)
  t.same(judge(rule('RELATIVE_CHANGE', 'DECREASES_BY', '5'), d('15'), d('10')).holds, false)
  t.same(judge(rule('RELATIVE_CHANGE', 'GREATER_THAN', '-20'), d('9'), d('10')).holds, true, 'a comparison compares the signed percentage')
  t.same(judge(rule('RELATIVE_CHANGE', 'PERCENT_INCREASE', '50'), d('15'), d('0')), { value: null, holds: null }, 'a percentage of nothing is undefined')
})
