// The public API of the meterd package: the webhook verifier and the record types. Importing
// it loads no part of the daemon; the daemon itself is `meterd/daemon` (src/daemon.ts).
export type { UsageRecord, CompletionRecord, ToolRecord, Attribution, Cost } from './model/usage-record.js'
export * from './verify.js'
