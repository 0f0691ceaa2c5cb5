import t from 'tap'
import { goVideo, openaiNodeImage, openaiNodeSpeech, openaiNodeTranscription } from '../fixtures/wire-examples.js'
import { call, startMeterd } from '../helpers/meterd.js'
import { MediaPriceBook, priceMedia } from '../../src/domain/pricing/media-price-book.js'
import { loadMediaPriceBook, schema } from '../../src/processors/pricing/descriptor.js'
import { checkAgainst } from '../../src/core/config/schema.js'

const book = loadMediaPriceBook(checkAgainst(schema, {}, '').value)
const API = '/profitstream/v2/api/sources/metrics/ai'

t.test('images, audio and video as real clients post them are stored as their own kinds, priced, and read back', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const cases = [
    { path: 'images', body: openaiNodeImage, label: 'ai.image', list: 'aIImageMetricResourceList', total: '0.24', part: 'imageCost' },
    { path: 'audio', body: openaiNodeSpeech, label: 'ai.audio', list: 'aIAudioMetricResourceList', total: '0.015', part: 'characterCost' },
    { path: 'audio', body: openaiNodeTranscription, label: 'ai.audio', list: 'aIAudioMetricResourceList', total: '0.009', part: 'audioCost' },
    { path: 'video', body: goVideo, label: 'ai.video', list: 'aIVideoMetricResourceList', total: '0.8', part: 'videoCost' },
  ]
  for (const c of cases) {
    const res = await call(`${m.url}/meter/v2/ai/${c.path}`, { key, body: c.body })
    t.equal(res.status, 201, `${c.body.model} → 201 ${res.text}`)
    t.match(res.body, { id: /^[0-9A-Z]{26}$/, resourceType: 'metering', label: c.label, signature: /^sha256:/ })
    const back = await call(`${m.url}${API}/${c.path}?transactionId=${c.body.transactionId}`, { key })
    t.equal(back.status, 200)
    const [stored] = back.body._embedded[c.list]
    t.match(stored, { id: res.body.id, model: c.body.model, transactionId: c.body.transactionId, cost: { total: c.total, source: 'pricebook', parts: { [c.part]: c.total } } }, `${c.body.model} costs ${c.total}`)
    t.equal(stored.totalCost, Number(c.total))
  }
  const completions = await call(`${m.url}/profitstream/v2/api/sources/metrics/ai/completions`, { key })
  t.equal(completions.body._embedded.aICompletionMetricResourceList.length, 0, 'none of them is a completion')
})

t.test('transactionId dedup and Idempotency-Key replay work on the media routes', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const first = await call(`${m.url}/meter/v2/ai/images`, { key, body: openaiNodeImage })
  const again = await call(`${m.url}/meter/v2/ai/images`, { key, body: openaiNodeImage })
  t.equal(again.status, 201)
  t.equal(again.body.id, first.body.id, 'a retry is answered with the first id')
  const back = await call(`${m.url}${API}/images`, { key })
  t.equal(back.body.page.totalElements, 1, 'and stored once')
  // The same transactionId on another kind is another record.
  t.not((await call(`${m.url}/meter/v2/ai/video`, { key, body: { ...goVideo, transactionId: openaiNodeImage.transactionId } })).body.id, first.body.id)

  const idem = { 'idempotency-key': 'img-key-1' }
  const a = await call(`${m.url}/meter/v2/ai/audio`, { key, body: openaiNodeSpeech, headers: idem })
  const b = await call(`${m.url}/meter/v2/ai/audio`, { key, body: openaiNodeSpeech, headers: idem })
  t.equal(b.status, 201)
  t.equal(b.headers.get('idempotent-replayed'), 'true')
  t.equal(b.text, a.text, 'the first answer replayed byte for byte')
  const c = await call(`${m.url}/meter/v2/ai/audio`, { key, body: { ...openaiNodeSpeech, characterCount: 5 }, headers: idem })
  t.equal(c.status, 409)
  t.equal(c.body.error.code, 'idempotency_key_mismatch')
})

t.test('media records are validated like completions, with their own counts', async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const post = (body: Record<string, unknown>) => call(`${m.url}/meter/v2/ai/images`, { key, body })
  const missing = await post({ ...openaiNodeImage, model: undefined })
  t.equal(missing.status, 400)
  t.same([missing.body.error.code, missing.body.error.param], ['missing_field', 'model'])
  const negative = await call(`${m.url}/meter/v2/ai/video`, { key, body: { ...goVideo, durationSeconds: -1 } })
  t.same([negative.status, negative.body.error.param], [400, 'durationSeconds'])
  // Priced per second, 1e300 was stored with a 301-digit cost; the seconds are bounded as the counts are.
  for (const field of ['durationSeconds', 'requestedDurationSeconds']) {
    const huge = await call(`${m.url}/meter/v2/ai/video`, { key, body: { ...goVideo, transactionId: `huge-${field}`, [field]: 1e300 } })
    t.same([huge.status, huge.body.error.code, huge.body.error.param], [400, 'invalid_field', field], `${field} 1e300`)
    t.match(huge.body.error.message, /at most 9007199254740991/)
  }
  t.equal((await call(`${API}/video`.replace(/^/, m.url), { key })).body.page.totalElements, 0, 'nothing stored')
  const fraction = await post({ ...openaiNodeImage, actualImageCount: 1.5 })
  t.same([fraction.status, fraction.body.error.param], [400, 'actualImageCount'])
  t.equal((await post({ ...openaiNodeImage, transactionId: 'no-stop-reason', stopReason: undefined })).status, 201, 'stopReason is optional here')
})

t.test('priceMedia: variants, quantities, client costs and what stays unpriced', async (t) => {
  const img = (extra: Record<string, unknown>) => ({ ...openaiNodeImage, ...extra }) as any
  t.equal(priceMedia(book, 'image', img({ attributes: { quality: 'standard', resolution: '1024x1024' }, actualImageCount: 3 })).total, '0.12', 'dall-e-3 standard square: 3 × 0.04')
  t.equal(priceMedia(book, 'image', img({ attributes: { quality: 'hd' }, actualImageCount: 1 })).total, '0.08', 'hd without a size: the hd row')
  t.equal(priceMedia(book, 'image', img({ attributes: undefined, actualImageCount: undefined, requestedImageCount: 2 })).total, '0.08', 'no traits: the default, by the requested count')
  t.equal(priceMedia(book, 'image', img({ model: 'gpt-image-1', attributes: { quality: 'high', size: '1536x1024' }, actualImageCount: 1 })).total, '0.25')
  t.equal(priceMedia(book, 'image', img({ model: 'dall-e-2', attributes: { size: '256x256' }, actualImageCount: 4 })).total, '0.064')
  t.equal(priceMedia(book, 'image', img({ provider: 'Azure', model: 'dall-e-3', attributes: {}, actualImageCount: 1 })).total, '0.04', 'Azure is an OpenAI alias')
  t.equal(priceMedia(book, 'image', img({ provider: 'Google', model: 'imagen-4.0-generate-001', attributes: {}, actualImageCount: 2 })).total, '0.08')
  t.equal(priceMedia(book, 'image', img({ provider: 'SomeGateway', model: 'imagen-4.0-fast-generate-001', attributes: {}, actualImageCount: 1 })).total, '0.02', 'an unknown provider gets the list price of a known model')
  const speech = (extra: Record<string, unknown>) => ({ ...openaiNodeSpeech, ...extra }) as any
  t.equal(priceMedia(book, 'audio', speech({ model: 'tts-1-hd', characterCount: 250_000 })).total, '7.5')
  t.same(priceMedia(book, 'audio', speech({ characterCount: undefined })), { currency: 'USD', total: '0', parts: {}, source: 'unpriced', note: 'missing_character_count', priceVersion: 'media:2026-11-24:openai/tts-1@2023-11-06' })
  t.equal(priceMedia(book, 'audio', speech({ model: 'gpt-4o-mini-tts', characterCount: undefined, durationSeconds: 120 })).total, '0.03', 'an estimated per-minute speech price')
  t.equal(priceMedia(book, 'audio', { ...openaiNodeTranscription, provider: 'groq', model: 'whisper-large-v3-turbo', durationSeconds: 5400 } as any).total, '0.06', '1.5 h at 0.04 per hour')
  t.equal(priceMedia(book, 'video', { ...goVideo, model: 'veo-3.1-fast-generate-preview', provider: 'google' } as any).total, '1.2', 'an alias: 8 s × 0.15')
  t.match(priceMedia(book, 'video', { ...goVideo, model: 'unknown-video' } as any), { source: 'unpriced', note: 'unknown_model' })
  t.match(priceMedia(book, 'video', { ...goVideo, totalCost: 2.5 } as any), { source: 'client', total: '2.5' })
  t.match(priceMedia(book, 'video', { ...goVideo, billingSkipped: true, skipReason: 'FREE_TIER' } as any), { source: 'skipped', note: 'FREE_TIER', total: '0' })
  t.ok(book instanceof MediaPriceBook)
})

t.test('an image record is a usage.image webhook event', async (t) => {
  const { startWebhookMeterd, startReceiver, api } = await import('../helpers/webhook-receiver.js')
  const { m, engine } = await startWebhookMeterd(t)
  const rx = await startReceiver(t)
  const key = await m.key({ team: 'team-a' })
  t.equal((await call(api(m), { key, body: { name: 'all usage', url: rx.url } })).status, 201)
  const res = await call(`${m.url}/meter/v2/ai/images`, { key, body: openaiNodeImage })
  t.equal(res.status, 201)
  await engine.settle()
  const [delivery] = await rx.waitFor(1)
  t.match(delivery.json, { type: 'usage.image', data: { id: res.body.id, model: 'dall-e-3', cost: { total: '0.24' } } })
  t.equal(delivery.headers['x-service-event-type'], 'usage.image')
})

t.test('an unknown model is stored unpriced and repriced once the media book knows it', async (t) => {
  const { writeFileSync } = await import('node:fs')
  const { join } = await import('node:path')
  const { spawnSync } = await import('node:child_process')
  const { PACKAGE_ROOT } = await import('../../src/core/paths.js')
  const { writeConfig, tempDir, removeDir } = await import('../helpers/meterd.js')
  const dir = tempDir()
  t.teardown(() => removeDir(dir))
  const dataDir = join(dir, 'data')
  const m = await startMeterd(t, { dataDir })
  const key = await m.key()
  const res = await call(`${m.url}/meter/v2/ai/images`, { key, body: { ...openaiNodeImage, model: 'pixel-painter-2', transactionId: 'img-unknown-1' } })
  t.equal(res.status, 201)
  const stored = (await call(`${m.url}${API}/images`, { key })).body._embedded.aIImageMetricResourceList[0]
  t.match(stored.cost, { source: 'unpriced', note: 'unknown_model' })
  await m.close()
  const bookFile = join(dir, 'media.yaml')
  writeFileSync(bookFile, 'version: "test"\nproviders:\n  openai:\n    models:\n      pixel-painter-2: { effective: 2026-01-01, per_image: 0.5 }\n')
  const cfg = writeConfig(dir, { storage: { path: dataDir }, processors: { pricing: { media_price_book: bookFile } } }, 'reprice.yaml')
  const run = spawnSync(process.execPath, [join(PACKAGE_ROOT, 'bin/meterd.js'), 'reprice', '--config', join(PACKAGE_ROOT, 'config/meterd.yaml'), '--config', cfg, '--kind', 'image', '--json'], { encoding: 'utf8', timeout: 30_000 })
  t.equal(run.status, 0, run.stderr)
  t.match(JSON.parse(run.stdout), { examined: 1, priced: 1, ids: [res.body.id] })
  const again = await startMeterd(t, { dataDir })
  const back = (await call(`${again.url}${API}/images`, { key })).body._embedded.aIImageMetricResourceList[0]
  t.match(back.cost, { source: 'pricebook', total: '1', priceVersion: 'media:test:openai/pixel-painter-2@2026-01-01' }, 'two images at 0.5')
})

t.test('a media price past 10^9 USD is refused when the book loads, naming the model and the field', async (t) => {
  const entry = (e: Record<string, unknown>) => ({ version: 'x', providers: { acme: { models: { pic: { effective: '2026-01-01', ...e } } } } })
  t.doesNotThrow(() => new MediaPriceBook(entry({ per_image: 1e9 }) as never))
  t.throws(() => new MediaPriceBook(entry({ per_second: '1000000001' }) as never), /acme\/pic: per_second must be at most 1000000000/)
  t.throws(() => new MediaPriceBook(entry({ variants: [{ per_image: 1 }, { per_image: 1e22 }] }) as never), /acme\/pic: variants\[1\]\.per_image must be at most/)
})
