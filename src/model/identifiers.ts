/**
 * The longest identifier meterd takes in a body or a query (transactionId, traceId, toolId,
 * Idempotency-Key), in UTF-16 code units as JSON Schema's maxLength counts them. Each unit is at
 * most 3 bytes of UTF-8, so an identifier is at most 765 bytes: an LMDB key (at most 1,978 bytes)
 * holds one beside a team name (also at most 255) and the rest of an index key.
 */
export const MAX_ID_LENGTH = 255

/** True when `v` is too long to be an identifier (checked before any store sees it). */
export const idTooLong = (v: string): boolean => v.length > MAX_ID_LENGTH
