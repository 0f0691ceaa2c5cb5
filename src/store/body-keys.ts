/**
 * The property names a stored body writes as one byte (record-codec.ts, "the body's own
 * encoding"): byte i stands for BODY_KEYS[i]. Any other name is written as its text.
 *
 * This table is part of the on-disk format of usage records. It is append-only: never reorder,
 * rename or remove an entry (records already stored name their keys by position); add new
 * names at the end only. A build meets a byte past its own table only in a record written by a
 * newer build, and refuses that record rather than guess. At most KEY_LITERAL (0xfe) entries.
 *
 * The names are the usage bodies' fields: the REST completion, media and tool-event fields
 * (src/model/schemas.ts, wire-contract §1.2, §1.3, §3.1), the subscriber object's, and the
 * fields the genai connector adds to the bodies it builds from OpenTelemetry. `__proto__` must
 * never be one (the decoder gives a literal `__proto__` key its own property).
 */
export const BODY_KEYS: readonly string[] = [
  // 0: completion fields, in the order of CompletionSchema
  'model', 'provider', 'inputTokenCount', 'outputTokenCount', 'totalTokenCount', 'stopReason',
  'requestTime', 'completionStartTime', 'responseTime', 'requestDuration', 'isStreamed', 'costType',
  'transactionId', 'operationType', 'organizationName', 'productName', 'subscriptionId', 'subscriber',
  'agent', 'agentVersion', 'taskType', 'traceId', 'traceType', 'traceName', 'transactionName',
  'parentTransactionId', 'retryNumber', 'environment', 'region', 'credentialAlias', 'ticketId', 'taskId',
  'middlewareSource', 'modelSource', 'operationSubtype', 'responseQualityScore', 'reasoningTokenCount',
  'cacheCreationTokenCount', 'cacheReadTokenCount', 'cacheCreation5mTokenCount', 'cacheCreation1hTokenCount',
  'inputTokenCost', 'outputTokenCost', 'cacheCreationTokenCost', 'cacheReadTokenCost', 'totalCost',
  'costMultiplier', 'billingSkipped', 'skipReason', 'pricingTier', 'timeToFirstToken', 'mediationLatency',
  'temperature', 'errorReason', 'errorCode', 'attributes', 'systemPrompt', 'inputMessages', 'outputResponse',
  'promptsTruncated',
  // 60: inside `subscriber` and its `credential`
  'id', 'email', 'credential', 'name', 'value',
  // 65: media fields
  'requestedImageCount', 'actualImageCount', 'characterCount', 'durationSeconds', 'requestedDurationSeconds', 'billingUnit',
  // 71: tool-event fields
  'toolId', 'timestamp', 'operation', 'durationMs', 'success', 'errorMessage', 'costUsd', 'organizationId',
  'subscriberCredential', 'product', 'productId', 'workflowId', 'usageMetadata',
  // 84: further optional fields clients send (wire-contract §1.3) and those of the genai connector
  'agenticJobId', 'agenticJobName', 'agenticJobType', 'agenticJobVersion', 'squadId', 'squadName', 'squadRole',
  'subscriberEmailSource', 'modelHost', 'codingAssistantAccountUuid', 'promptId', 'promptLength', 'querySource',
  'subagentType', 'skillName', 'skillKind', 'skillSource', 'skillPluginName', 'skillMarketplaceName',
  'skillInvocationTrigger', 'effort', 'speed', 'requestedServiceTier', 'actualServiceTier', 'subscriptionTier',
  'systemFingerprint', 'failureCode', 'clientCostUsd', 'sessionId',
  // 113: append new names below this line, never above it.
]
