/** Ingest: dedup and Idempotency-Key for every receiver (see ingest.ts). */
export { Ingest, type IngestItem, type Ingested, type IngestSettings } from './ingest.js'
export type { IdempotencyKey } from './idempotency.js'
