// `import { verifyWebhook } from 'meterd/verify'`: the webhook verifier alone, for receivers.
// It imports node:crypto and nothing of the daemon (test/webhooks/package-exports.test.ts).
export { verifyWebhook, WebhookDeduplicator, DEFAULT_TOLERANCE_SECONDS } from './domain/webhooks/verify.js'
export type { VerifyOptions, VerifyResult, VerifyFailure, HeaderBag } from './domain/webhooks/verify.js'
export { signatureOf, signatureHeader, webhookHeaderNames } from './domain/webhooks/signature.js'
