/**
 * The attribution processor stores each dimension trimmed (DESIGN §2), and skips String#trim
 * for a value that starts and ends with printable ASCII (it is on every record's path). Whatever
 * a client sends, the stored dimension must be what trim() makes of it: whitespace that is not
 * ASCII (no-break space, line separator, byte-order mark) included.
 */
import t from 'tap'
import { attributionOf } from '../../src/processors/attribution/index.js'
import type { UsageRecord } from '../../src/model/usage-record.js'

const dims = (body: Record<string, unknown>, kind = 'completion') => attributionOf({ kind, body } as unknown as UsageRecord)

t.test('every dimension is stored as String#trim makes it, for ASCII and Unicode whitespace alike', async (t) => {
  const edges = ['', ' ', '\t', '\n', '\r\n', '\u00a0', '\u2028', '\u3000', '\ufeff', '\u000b']
  const cores = ['AcmeOrg', 'a', 'x y', 'é', 'Ünïcode', '~!', '\u00a0inner\u00a0']
  let bad = 0
  for (const before of edges)
    for (const after of edges)
      for (const core of cores) {
        const v = `${before}${core}${after}`
        const a = dims({
          organizationName: v,
          productName: v,
          agent: v,
          traceId: v,
          workflowId: v,
          taskType: v,
          subscriptionId: v,
          ticketId: v,
          environment: v,
          region: v,
          subscriber: { id: v, email: v, credential: { name: v } },
        })
        const want = v.trim()
        for (const k of ['organizationName', 'productName', 'agent', 'traceId', 'workflowId', 'taskType', 'subscriptionId', 'ticketId', 'environment', 'region', 'subscriberId', 'subscriberCredentialName'] as const)
          if (a[k] !== want) bad++
        if (a.subscriberEmail !== want.toLowerCase()) bad++
      }
  t.equal(bad, 0, 'no dimension differs from trim() of what was sent')
  t.equal(dims({ organizationName: ' \u00a0Acme Org\u2028' }).organizationName, 'Acme Org')
  t.equal(dims({ productName: 'Gold' }).productName, 'Gold', 'a value with nothing to trim is kept as sent')
  t.equal(dims({ productName: 42 }).productName, '', 'a value that is not text is no dimension')
})

t.test('tool events take SPEC’s organizationId / product, trimmed the same way', async (t) => {
  const a = dims({ organizationId: '\u00a0org-1 ', product: '\tp ', subscriberCredential: ' cred\ufeff' }, 'tool')
  t.same([a.organizationName, a.productName, a.subscriberCredentialName], ['org-1', 'p', 'cred'])
})
