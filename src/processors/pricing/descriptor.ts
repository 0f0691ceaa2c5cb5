// The pricing processor as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { existsSync } from 'node:fs'
import { isAbsolute, join, resolve } from 'node:path'
import { Type, type Static } from '@sinclair/typebox'
import type { Descriptor, ProcessorFactory } from '../../host/component.js'
import { PACKAGE_ROOT } from '../../core/paths.js'
import { MediaPriceBook } from '../../domain/pricing/media-price-book.js'
import { PriceBook, ratesTooLarge, type ModelOverride } from '../../domain/pricing/price-book.js'
import { SCOPE_DIMENSIONS, type ToolPricingOptions } from '../../domain/pricing/tool-pricing.js'

const Price = Type.Union([Type.Number({ minimum: 0 }), Type.String({ pattern: '^\\d+(\\.\\d+)?$' })], {
  description: 'USD per million tokens, at most 1000000000 (a number or a decimal string)',
})

const RatesSchema = {
  input: Price,
  output: Price,
  cache_read: Type.Optional(Price),
  cache_write_5m: Type.Optional(Price),
  cache_write_1h: Type.Optional(Price),
  reasoning: Type.Optional(Price),
}

export const schema = Type.Object(
  {
    price_book: Type.String({ default: 'config/prices.yaml', description: "The model price book; a relative path is looked up in the working directory, then in meterd's own folder" }),
    media_price_book: Type.String({
      default: 'config/media-prices.yaml',
      description: 'Per-image, per-character, per-minute and per-second prices of image, audio and video models (looked up like price_book)',
    }),
    models: Type.Array(
      Type.Object(
        {
          provider: Type.String({ minLength: 1 }),
          model: Type.String({ minLength: 1 }),
          effective: Type.String({ minLength: 1, description: 'Date the price took effect; part of the price version stored on records' }),
          ...RatesSchema,
          aliases: Type.Optional(Type.Array(Type.String())),
          source: Type.Optional(Type.String({ description: 'Where the price was read and when (page and date checked); kept with the price, never used to compute a cost' })),
          long_context: Type.Optional(
            Type.Object({ threshold: Type.Integer({ minimum: 1 }), ...Object.fromEntries(Object.entries(RatesSchema).map(([k, v]) => [k, Type.Optional(v)])) }, { additionalProperties: false }),
          ),
        },
        { additionalProperties: false },
      ),
      { default: [], description: "Operator overrides and additions to the price book; an entry replaces the book's model it matches" },
    ),
    tools: Type.Object(
      {
        billing_period: Type.Union([Type.Literal('month'), Type.Literal('week'), Type.Literal('day'), Type.Literal('year')], {
          default: 'month',
          description: 'Period of tool-price aggregates, in UTC (week: ISO weeks from Monday)',
        }),
        scope: Type.Array(Type.Union(SCOPE_DIMENSIONS.map((d) => Type.Literal(d))), {
          default: ['team', 'organizationName'],
          minItems: 1,
          description: 'Dimensions an aggregate is kept per',
        }),
      },
      { additionalProperties: false, default: {} },
    ),
  },
  { additionalProperties: false },
)
export type PricingConfig = Static<typeof schema>

export function resolvePriceBookPath(p: string): string {
  if (isAbsolute(p)) return p
  const here = resolve(p)
  return existsSync(here) ? here : join(PACKAGE_ROOT, p)
}

export function loadPriceBook(config: PricingConfig): PriceBook {
  return PriceBook.load(resolvePriceBookPath(config.price_book), config.models as ModelOverride[])
}

export function loadMediaPriceBook(config: PricingConfig): MediaPriceBook {
  return MediaPriceBook.load(resolvePriceBookPath(config.media_price_book))
}

export function toolOptions(config: PricingConfig): ToolPricingOptions {
  return { billingPeriod: config.tools.billing_period, scope: config.tools.scope }
}

export const pricingDescriptor: Descriptor<ProcessorFactory<typeof schema>> = {
  kind: 'processor',
  type: 'pricing',
  description: 'Prices usage records: completions and media from the price books, tool events from the tool registry',
  signals: ['usage'],
  mutatesData: true,
  schema,
  check(config, ctx) {
    let overridesOk = true
    config.models.forEach((m, i) => {
      for (const [field, why] of ratesTooLarge(m as ModelOverride)) {
        ctx.issue(`models[${i}].${field}`, `${why} per million tokens`)
        overridesOk = false
      }
    })
    // The book is loaded with the overrides, which would only fail again on the same price.
    if (overridesOk)
      try {
        loadPriceBook(config)
      } catch (err) {
        ctx.issue('price_book', `cannot load the price book: ${(err as Error).message}`)
      }
    try {
      loadMediaPriceBook(config)
    } catch (err) {
      ctx.issue('media_price_book', `cannot load the media price book: ${(err as Error).message}`)
    }
  },
}
