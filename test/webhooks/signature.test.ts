import { createHash, createHmac, timingSafeEqual } from 'node:crypto'
import t from 'tap'
import { signatureHeader, verifyWebhook, WebhookDeduplicator } from '../../src/verify.js'

// A fixed vector: anyone can recompute it (SPEC Events → Signature algorithm).
const SECRET = 'whsec_meterd_test_vector_secret'
const PREVIOUS = 'whsec_previous'
const TS = '1700000000'
const BODY = '{"id":"evt_vector","type":"test","created":"2023-11-14T22:13:20.000Z","teamId":"team-a","data":{}}'
const EXPECTED = 'sha256=32f37883ccc38dd6a311420d52a866dc245294da16ec6db878aaaaf2cc1f5717'
const EXPECTED_PREVIOUS = 'sha256=ae7f6f41a338e3fd70c553e36e2e0520dafaf119b7f35ddce85d9a67618e3743'
const NOW = 1700000000 * 1000

const headers = (sig: string, ts = TS) => ({ 'x-service-signature-256': sig, 'x-service-webhook-timestamp': ts, 'x-service-webhook-id': 'evt_vector' })

t.test('signature vectors: meterd and an independent node:crypto computation agree on a fixed value', async (t) => {
  t.equal(signatureHeader([SECRET], TS, BODY), EXPECTED)
  t.equal(signatureHeader([SECRET, PREVIOUS], TS, Buffer.from(BODY)), `${EXPECTED}, ${EXPECTED_PREVIOUS}`, 'overlap: new first, then previous')
  const independent = 'sha256=' + createHmac('sha256', Buffer.from(SECRET, 'utf8')).update(Buffer.from(`${TS}.${BODY}`, 'utf8')).digest('hex')
  t.equal(independent, EXPECTED)
  const r = verifyWebhook(Buffer.from(BODY), headers(EXPECTED), { secrets: SECRET, now: NOW })
  t.same(r, { ok: true, timestamp: 1700000000, eventId: 'evt_vector' })
})

t.test('receiver rules', async (t) => {
  const ok = (h: Record<string, string>, body: string | Buffer = BODY, secrets: string | string[] = SECRET, now = NOW) =>
    verifyWebhook(typeof body === 'string' ? Buffer.from(body) : body, h, { secrets, now })

  const flipped = Buffer.from(BODY)
  flipped[10] ^= 0x01
  t.match(ok(headers(EXPECTED), flipped), { ok: false, reason: 'signature_mismatch' }, 'a body changed by one byte is rejected')
  t.match(ok(headers(EXPECTED), BODY + ' '), { ok: false, reason: 'signature_mismatch' }, 'one byte appended is rejected')
  const reserialised = JSON.stringify(JSON.parse(BODY), null, 1)
  t.match(ok(headers(EXPECTED), reserialised), { ok: false }, 'a re-serialised body does not verify: use the raw bytes')

  t.match(ok(headers(EXPECTED), BODY, SECRET, NOW + 301_000), { ok: false, reason: 'timestamp_too_old' }, 'timestamp 301 s old')
  t.match(ok(headers(EXPECTED), BODY, SECRET, NOW - 301_000), { ok: false, reason: 'timestamp_in_future' }, 'timestamp 301 s ahead')
  t.match(ok(headers(EXPECTED), BODY, SECRET, NOW + 300_000), { ok: true }, '300 s old is still inside the tolerance')
  t.match(ok(headers(EXPECTED), BODY, SECRET, NOW - 300_000), { ok: true }, '300 s ahead is still inside the tolerance')
  // The timestamp is signed: moving it forward to dodge the window breaks the signature.
  t.match(ok(headers(EXPECTED, '1700000200'), BODY, SECRET, NOW), { ok: false, reason: 'signature_mismatch' }, 'a changed timestamp is rejected')

  t.match(ok(headers(EXPECTED), BODY, 'whsec_wrong'), { ok: false, reason: 'signature_mismatch' }, 'a wrong secret is rejected')
  t.match(ok(headers(EXPECTED), BODY, []), { ok: false, reason: 'no_secret' })
  t.match(ok({ 'x-service-webhook-timestamp': TS }), { ok: false, reason: 'missing_signature' })
  t.match(ok({ 'x-service-signature-256': EXPECTED }), { ok: false, reason: 'missing_timestamp' })
  t.match(ok(headers('sha1=abc')), { ok: false, reason: 'bad_signature_format' })
  t.match(ok(headers(EXPECTED, 'yesterday')), { ok: false, reason: 'bad_timestamp' })

  // Any signature × any secret (rotation overlap on either side).
  const both = `${EXPECTED}, ${EXPECTED_PREVIOUS}`
  t.match(ok(headers(both), BODY, PREVIOUS), { ok: true }, 'a receiver still on the previous secret accepts an overlap delivery')
  t.match(ok(headers(both), BODY, SECRET), { ok: true }, 'a receiver on the new secret accepts it')
  t.match(ok(headers(EXPECTED_PREVIOUS), BODY, [SECRET, PREVIOUS]), { ok: true }, 'a receiver holding both secrets accepts either')
  t.match(ok(headers(`sha256=${'0'.repeat(64)}, ${EXPECTED}`), BODY, SECRET), { ok: true }, 'a non-matching first value does not hide a match')

  // Headers as a fetch Headers object and with another vendor word.
  const h = new Headers({ 'X-Acme-Signature-256': EXPECTED, 'X-Acme-Webhook-Timestamp': TS })
  t.match(verifyWebhook(BODY, h, { secrets: SECRET, now: NOW, vendorWord: 'Acme' }), { ok: true })

  // Constant-time compare is what the verifier uses; this is the comparison it must agree with.
  t.ok(timingSafeEqual(Buffer.from(EXPECTED.slice(7), 'hex'), createHmac('sha256', SECRET).update(`${TS}.${BODY}`).digest()))
})

t.test('the dedup helper catches a duplicate delivery', async (t) => {
  const d = new WebhookDeduplicator({ ttlMs: 60_000 })
  const k = WebhookDeduplicator.keyOf({ eventId: 'evt_vector' })
  t.equal(d.firstSeen(k, 1000), true)
  t.equal(d.firstSeen(k, 2000), false, 'the retry of the same event is a duplicate')
  t.equal(d.firstSeen(WebhookDeduplicator.keyOf({ eventId: 'evt_other' }), 2000), true)
  t.equal(d.firstSeen(k, 61_001), true, 'forgotten after the TTL')
  const byBody = WebhookDeduplicator.keyOf({ timestamp: TS, rawBody: BODY })
  t.equal(byBody, `tb:${TS}:${createHash('sha256').update(BODY).digest('hex')}`, 'timestamp + body hash when there is no id')
  t.equal(d.firstSeen(byBody, 1), true)
  t.equal(d.firstSeen(WebhookDeduplicator.keyOf({ timestamp: TS, rawBody: Buffer.from(BODY) }), 2), false)
  const small = new WebhookDeduplicator({ maxEntries: 2 })
  small.firstSeen('a'), small.firstSeen('b'), small.firstSeen('c')
  t.equal(small.size, 2, 'bounded')
})
