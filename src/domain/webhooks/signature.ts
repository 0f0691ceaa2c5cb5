import { createHmac } from 'node:crypto'

/**
 * The signature of SPEC's Events section: HMAC-SHA256 keyed with the signing secret (its
 * UTF-8 bytes) over `timestamp + "." + raw body`, as `sha256=<lowercase hex>`.
 * Shared by the sender (the delivery engine) and the receiver (verify.ts).
 */
export function signatureOf(secret: string, timestamp: string | number, body: Buffer | string): string {
  const h = createHmac('sha256', secret)
  h.update(String(timestamp))
  h.update('.')
  h.update(body)
  return 'sha256=' + h.digest('hex')
}

/** The signature header value: one value, or `sha256=<new>, sha256=<previous>` during an overlap. */
export function signatureHeader(secrets: readonly string[], timestamp: string | number, body: Buffer | string): string {
  return secrets.map((s) => signatureOf(s, timestamp, body)).join(', ')
}

/** Header names for a vendor word (`Service` → `X-Service-Signature-256`). */
export function webhookHeaderNames(vendorWord = 'Service') {
  return {
    signature: `X-${vendorWord}-Signature-256`,
    timestamp: `X-${vendorWord}-Webhook-Timestamp`,
    eventId: `X-${vendorWord}-Webhook-Id`,
    deliveryId: `X-${vendorWord}-Delivery-Id`,
    eventType: `X-${vendorWord}-Event-Type`,
  }
}
