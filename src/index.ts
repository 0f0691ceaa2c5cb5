// The public API of the meterd package (for embedding and for tests).
export { Service } from './core/service.js'
export { resolveConfig } from './core/config/resolve.js'
export { FACTORIES } from './components.js'
export { factoryMap } from './core/graph.js'
export type { UsageRecord, CompletionRecord, ToolRecord, Attribution, Cost } from './model/usage-record.js'
export { verifyWebhook, WebhookDeduplicator, DEFAULT_TOLERANCE_SECONDS } from './domain/webhooks/verify.js'
export type { VerifyOptions, VerifyResult, VerifyFailure, HeaderBag } from './domain/webhooks/verify.js'
export { signatureOf, signatureHeader, webhookHeaderNames } from './domain/webhooks/signature.js'
