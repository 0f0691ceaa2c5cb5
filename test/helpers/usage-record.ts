import type { UsageRecord } from '../../src/model/usage-record.js'

/**
 * A usage record as the ingest path builds it (meta fields in its order), with a small
 * completion body; `over` replaces any field, the body included.
 */
export function usageRecord(id: string, over: Partial<UsageRecord> = {}): UsageRecord {
  return {
    id,
    kind: 'completion',
    body: { model: 'gpt-4o-mini', provider: 'OpenAI', inputTokenCount: 12, outputTokenCount: null, totalTokenCount: 17, requestTime: '2026-11-21T23:55:47.661Z', subscriber: { id: 'u-1', credential: { name: 'key' } }, tags: ['a', 2, true], transactionId: `tx-${id}` },
    eventTime: '2026-11-21T23:55:47.661Z',
    receivedAt: '2026-11-25T12:00:00.000Z',
    caller: { account: 'acct-1', tenant: 'tenant-1', team: 'team-a', environment: 'production', keyId: 'key_1' },
    attribution: {
      organizationName: 'AcmeOrg', productName: 'Gold', subscriberId: 'u-1', subscriberEmail: 'u1@example.com', subscriberCredentialName: 'key',
      agent: 'agent-a', traceId: 'trace-1', workflowId: '', taskType: 'chat', subscriptionId: '', ticketId: '', environment: '', region: 'eu',
    },
    attributed: true,
    ...over,
  } as UsageRecord
}
