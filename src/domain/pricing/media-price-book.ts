import type { Cost, MediaBody, MediaKind } from '../../model/usage-record.js'
import { readBookFile } from './book-file.js'
import { dec, money, priceTooLarge, round, type Decimal } from './money.js'
import { modelCandidates } from './price-book.js'

/** How a media model is billed, USD per unit (YAML spelling in comments). */
interface MediaRates {
  perImage?: Decimal // per_image
  perMillionCharacters?: Decimal // per_million_characters
  perMinute?: Decimal // per_minute
  perHour?: Decimal // per_hour
  perSecond?: Decimal // per_second
}

interface Variant {
  quality?: string
  size?: string
  perImage: Decimal
}

export interface MediaPrice extends MediaRates {
  provider: string
  model: string
  effective: string
  variants: Variant[]
  version: string
}

type Price = number | string

interface MediaEntryYaml {
  effective: string
  per_image?: Price
  per_million_characters?: Price
  per_minute?: Price
  per_hour?: Price
  per_second?: Price
  variants?: { quality?: string; size?: string; per_image: Price }[]
  aliases?: string[]
  source?: string
}

export interface MediaPriceBookYaml {
  version: string
  providers: Record<string, { aliases?: string[]; models: Record<string, MediaEntryYaml> }>
}

const norm = (s: string) => s.trim().toLowerCase()
const opt = (v: Price | undefined) => (v === undefined ? undefined : dec(v))

/**
 * The media price book (config/media-prices.yaml): per-image, per-character, per-minute and
 * per-second list prices of image, speech, transcription and video models, matched by provider
 * and model like the token price book.
 */
export class MediaPriceBook {
  readonly version: string
  private readonly providerAlias = new Map<string, string>()
  private readonly models = new Map<string, Map<string, MediaPrice>>()

  constructor(book: MediaPriceBookYaml) {
    this.version = String(book.version)
    for (const [key, p] of Object.entries(book.providers ?? {})) {
      const k = norm(key)
      this.providerAlias.set(k, k)
      for (const a of p.aliases ?? []) this.providerAlias.set(norm(a), k)
      const map = new Map<string, MediaPrice>()
      this.models.set(k, map)
      for (const [model, e] of Object.entries(p.models ?? {})) {
        const name = norm(model)
        const price: MediaPrice = {
          provider: k,
          model: name,
          effective: String(e.effective ?? ''),
          perImage: opt(e.per_image),
          perMillionCharacters: opt(e.per_million_characters),
          perMinute: opt(e.per_minute),
          perHour: opt(e.per_hour),
          perSecond: opt(e.per_second),
          variants: (e.variants ?? []).map((v) => ({ quality: v.quality && norm(v.quality), size: v.size && norm(v.size), perImage: dec(v.per_image) })),
          version: `media:${this.version}:${k}/${name}@${e.effective}`,
        }
        const rates: [string, Decimal | undefined][] = [
          ['per_image', price.perImage],
          ['per_million_characters', price.perMillionCharacters],
          ['per_minute', price.perMinute],
          ['per_hour', price.perHour],
          ['per_second', price.perSecond],
          ...price.variants.map((v, i): [string, Decimal] => [`variants[${i}].per_image`, v.perImage]),
        ]
        for (const [field, d] of rates) {
          const why = d && priceTooLarge(d)
          if (why) throw new Error(`${k}/${name}: ${field} ${why}`)
        }
        map.set(name, price)
        for (const a of e.aliases ?? []) map.set(norm(a), price)
      }
    }
  }

  static load(path: string): MediaPriceBook {
    const book = readBookFile(path) as MediaPriceBookYaml
    if (!book || typeof book !== 'object' || !book.providers) throw new Error(`${path}: not a media price book (no providers)`)
    return new MediaPriceBook(book)
  }

  /** The price of a provider's model: the provider's own section, else any provider's (a gateway). */
  find(provider: string, model: string): MediaPrice | undefined {
    const pk = this.providerAlias.get(norm(provider))
    const order = pk ? [pk] : [...this.models.keys()]
    for (const name of modelCandidates(model)) for (const p of order) {
      const price = this.models.get(p)?.get(name)
      if (price) return price
    }
    return undefined
  }
}

const count = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : undefined)
const text = (v: unknown): string | undefined => (typeof v === 'string' && v.trim() ? norm(v) : undefined)

/** An image's quality and size as clients send them: in `attributes` (openai-node), or at the top level. */
function imageTraits(b: MediaBody): { quality?: string; size?: string } {
  const a = b.attributes && typeof b.attributes === 'object' ? (b.attributes as Record<string, unknown>) : {}
  const size = text(a.resolution) ?? text(a.size) ?? text(b.resolution) ?? text(b.size)
  return { quality: text(a.quality) ?? text(b.quality), size: size?.replace(/\s+/g, '') }
}

function perImage(p: MediaPrice, b: MediaBody): Decimal | undefined {
  const { quality, size } = imageTraits(b)
  for (const v of p.variants) if ((v.quality === undefined || v.quality === quality) && (v.size === undefined || v.size === size)) return v.perImage
  return p.perImage
}

/**
 * The billed quantity and charge of a media record. Speech is priced by character when the
 * record counts characters and the model has a character price; duration-billed models by
 * durationSeconds; images by the image count.
 */
function charge(kind: MediaKind, p: MediaPrice, b: MediaBody): { part: string; amount: Decimal } | { missing: string } {
  const chars = count(b.characterCount)
  const seconds = count(b.durationSeconds)
  if (kind === 'image' || (p.perImage && !p.perSecond && !p.perMinute && !p.perHour && !p.perMillionCharacters)) {
    const rate = perImage(p, b)
    if (!rate) return { missing: 'no_image_price' }
    const images = count(b.actualImageCount) ?? count(b.requestedImageCount) ?? 1
    return { part: 'imageCost', amount: rate.times(images) }
  }
  if (p.perMillionCharacters && chars !== undefined) return { part: 'characterCost', amount: p.perMillionCharacters.times(chars).div(1_000_000) }
  if (seconds !== undefined) {
    const part = kind === 'video' ? 'videoCost' : 'audioCost'
    if (p.perSecond) return { part, amount: p.perSecond.times(seconds) }
    if (p.perMinute) return { part, amount: p.perMinute.times(seconds).div(60) }
    if (p.perHour) return { part, amount: p.perHour.times(seconds).div(3600) }
  }
  return { missing: p.perMillionCharacters ? 'missing_character_count' : 'missing_duration' }
}

/**
 * The cost of an image, audio or video record (DESIGN §6): costs sent by the client win
 * (`totalCost`), `billingSkipped` is free, else the media price book's charge for the record's
 * images, characters or seconds, rounded once. A model the book does not know, or a record
 * without the quantity its model is billed by, is stored unpriced with the reason in `note`.
 */
export function priceMedia(book: MediaPriceBook, kind: MediaKind, body: MediaBody): Cost {
  if (body.billingSkipped === true)
    return { currency: 'USD', total: '0', parts: {}, source: 'skipped', note: typeof body.skipReason === 'string' ? body.skipReason : 'billing_skipped' }
  const price = book.find(body.provider, body.model)
  if (typeof body.totalCost === 'number') {
    const cost: Cost = { currency: 'USD', total: money(dec(body.totalCost)), parts: {}, source: 'client' }
    if (price) cost.priceVersion = price.version
    return cost
  }
  if (!price) return { currency: 'USD', total: '0', parts: {}, source: 'unpriced', note: 'unknown_model' }
  const c = charge(kind, price, body)
  if ('missing' in c) return { currency: 'USD', total: '0', parts: {}, source: 'unpriced', note: c.missing, priceVersion: price.version }
  const total = money(round(c.amount))
  return { currency: 'USD', total, parts: { [c.part]: total }, source: 'pricebook', priceVersion: price.version }
}
