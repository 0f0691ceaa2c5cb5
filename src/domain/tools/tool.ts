import { ApiError, invalid } from '../../core/errors.js'
import { dec, parseAmount, priceTooLarge } from '../pricing/money.js'
import { AGGREGATION_TYPES, TIERS_MODES, type AggregationType, type PricingElement, type Tier, type TiersMode } from '../../model/pricing-element.js'

/** Both generations of toolType seen on the wire (wire-contract §3.2). */
export const TOOL_TYPES = ['SDK', 'MCP_SERVER', 'AI_SERVICE', 'REST_API', 'LOCAL_FUNCTION', 'CUSTOM', 'MULTIMODAL', 'TOOL_CALL'] as const
export type ToolType = (typeof TOOL_TYPES)[number]
export const TOOL_ID = /^[A-Za-z0-9_-]{1,255}$/

export type ConfigSource = 'DATABASE' | 'YAML' | 'MERGED'

/** The fields a client sets (SPEC Tool), normalised: prices as decimal strings. */
export interface ToolSpec {
  toolId: string
  name: string
  toolType: ToolType
  description?: string
  toolProvider?: string
  version?: string
  enabled: boolean
  pricing: { currency: 'USD'; elements: PricingElement[] }
}

/** A registry entry as stored (and as the processor prices with it). */
export interface Tool extends ToolSpec {
  id: string
  team: string
  configSource: ConfigSource
  created: string
  updated: string
  deleted?: string
  /** Bumped on every change; part of the price version stored on each event. */
  revision: number
}

const bad = (param: string, message: string): ApiError => invalid('invalid_field', `${param} ${message}`, param)
const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)

function optString(b: Record<string, unknown>, field: string, max = 1024): string | undefined {
  const v = b[field]
  if (v === undefined || v === null) return undefined
  if (typeof v !== 'string' || v.length > max) throw bad(field, `must be a string of at most ${max} characters`)
  return v
}

/** `REST API`, `rest_api` and `REST_API` are one type; so are the docs' labels ("MCP Server"). Undefined if none. */
export function readToolType(v: unknown): ToolType | undefined {
  const t = typeof v === 'string' ? v.trim().toUpperCase().replace(/[\s-]+/g, '_') : ''
  return (TOOL_TYPES as readonly string[]).includes(t) ? (t as ToolType) : undefined
}

function toolType(v: unknown): ToolType {
  const t = readToolType(v)
  if (t === undefined) throw bad('toolType', `must be one of ${TOOL_TYPES.join(', ')}`)
  return t
}

function amount(v: unknown, param: string): string {
  const d = parseAmount(v)
  if (d === undefined) throw bad(param, 'must be a number ≥ 0 or a decimal string such as "0.05"')
  const tooLarge = priceTooLarge(d)
  if (tooLarge) throw bad(param, tooLarge)
  return d.toFixed()
}

function element(v: unknown, i: number): PricingElement {
  const p = `pricing.elements[${i}]`
  if (!isObj(v)) throw bad(p, 'must be an object')
  if (typeof v.name !== 'string' || v.name.trim() === '' || v.name.length > 255) throw bad(`${p}.name`, 'must be a non-empty string')
  // Element names key the usage, parts and quantities objects: "__proto__" there is the
  // prototype, not a key, so its usage would be priced at nothing without a word.
  if (v.name.trim() === '__proto__') throw bad(`${p}.name`, 'must not be __proto__')
  const agg = typeof v.aggregationType === 'string' ? v.aggregationType.trim().toUpperCase() : ''
  if (!(AGGREGATION_TYPES as readonly string[]).includes(agg)) throw bad(`${p}.aggregationType`, `must be one of ${AGGREGATION_TYPES.join(', ')}`)
  const mode = v.tiersMode === undefined || v.tiersMode === null ? 'volume' : typeof v.tiersMode === 'string' ? v.tiersMode.trim().toLowerCase() : ''
  if (!(TIERS_MODES as readonly string[]).includes(mode)) throw bad(`${p}.tiersMode`, `must be one of ${TIERS_MODES.join(', ')}`)
  const tiers: Tier[] = []
  if (v.tiers !== undefined && v.tiers !== null) {
    if (!Array.isArray(v.tiers)) throw bad(`${p}.tiers`, 'must be an array')
    v.tiers.forEach((t, j) => {
      const tp = `${p}.tiers[${j}]`
      if (!isObj(t)) throw bad(tp, 'must be an object with upTo and unitPrice')
      let upTo: string | null = null
      if (t.upTo !== undefined && t.upTo !== null && t.upTo !== '') {
        const d = parseAmount(t.upTo)
        if (d === undefined || d.lte(0)) throw bad(`${tp}.upTo`, 'must be a number > 0, or null for the unlimited last tier')
        upTo = d.toFixed()
      }
      const prev = tiers[j - 1]
      if (prev && prev.upTo === null) throw bad(`${p}.tiers[${j - 1}].upTo`, 'may be unlimited (null) only in the last tier')
      if (prev && upTo !== null && dec(upTo).lte(prev.upTo!)) throw bad(`${tp}.upTo`, `must be greater than the previous tier's upTo (${prev.upTo}); tiers ascend by upTo`)
      tiers.push({ upTo, unitPrice: amount(t.unitPrice, `${tp}.unitPrice`) })
    })
  }
  const unitPrice = v.unitPrice === undefined || v.unitPrice === null ? undefined : amount(v.unitPrice, `${p}.unitPrice`)
  if (unitPrice === undefined && tiers.length === 0) throw bad(`${p}.unitPrice`, 'is required when the element has no tiers')
  return { name: v.name.trim(), unitPrice: unitPrice ?? '0', aggregationType: agg as AggregationType, tiersMode: mode as TiersMode, tiers }
}

function pricing(v: unknown): ToolSpec['pricing'] {
  if (v === undefined || v === null) return { currency: 'USD', elements: [] }
  if (!isObj(v)) throw bad('pricing', 'must be an object with currency and elements')
  if (v.currency !== undefined && v.currency !== null && (typeof v.currency !== 'string' || v.currency.toUpperCase() !== 'USD'))
    throw bad('pricing.currency', 'must be USD')
  if (v.elements !== undefined && v.elements !== null && !Array.isArray(v.elements)) throw bad('pricing.elements', 'must be an array')
  const elements = ((v.elements as unknown[]) ?? []).map(element)
  const seen = new Set<string>()
  elements.forEach((e, i) => {
    if (seen.has(e.name)) throw bad(`pricing.elements[${i}].name`, `repeats "${e.name}"; element names are unique within a tool`)
    seen.add(e.name)
  })
  return { currency: 'USD', elements }
}

/** Validates a client's tool body (create, or the merged result of an update); 400 naming the field. */
export function parseToolSpec(body: unknown): ToolSpec {
  if (!isObj(body)) throw invalid('invalid_body', 'the body must be a JSON object')
  const toolId = body.toolId
  if (toolId === undefined || toolId === null || toolId === '') throw invalid('missing_field', 'toolId is required', 'toolId')
  if (typeof toolId !== 'string' || !TOOL_ID.test(toolId)) throw bad('toolId', 'must be 1 to 255 letters, digits, hyphens or underscores')
  if (body.name === undefined || body.name === null || body.name === '') throw invalid('missing_field', 'name is required', 'name')
  if (typeof body.name !== 'string' || body.name.length > 255) throw bad('name', 'must be a string of at most 255 characters')
  if (body.toolType === undefined || body.toolType === null) throw invalid('missing_field', 'toolType is required', 'toolType')
  if (body.enabled !== undefined && body.enabled !== null && typeof body.enabled !== 'boolean') throw bad('enabled', 'must be a boolean')
  return {
    toolId,
    name: body.name,
    toolType: toolType(body.toolType),
    description: optString(body, 'description', 4096),
    toolProvider: optString(body, 'toolProvider', 255) ?? optString(body, 'provider', 255),
    version: optString(body, 'version', 64),
    enabled: body.enabled === undefined || body.enabled === null ? true : body.enabled,
    pricing: pricing(body.pricing),
  }
}

/** A tool as the API shows it: prices as JSON numbers, `team` nested as GET responses do (wire-contract §3.2). */
export function toToolResource(t: Tool): Record<string, unknown> {
  const out: Record<string, unknown> = {
    id: t.id,
    teamId: t.team,
    team: { id: t.team },
    toolId: t.toolId,
    name: t.name,
    description: t.description,
    toolType: t.toolType,
    toolProvider: t.toolProvider,
    version: t.version,
    enabled: t.enabled,
    pricing: {
      currency: t.pricing.currency,
      elements: t.pricing.elements.map((e) => ({
        name: e.name,
        unitPrice: Number(e.unitPrice),
        aggregationType: e.aggregationType,
        tiersMode: e.tiersMode,
        tiers: e.tiers.map((x) => ({ upTo: x.upTo === null ? null : Number(x.upTo), unitPrice: Number(x.unitPrice) })),
      })),
    },
    configSource: t.configSource,
    created: t.created,
    updated: t.updated,
    revision: t.revision,
  }
  if (t.deleted) out.deleted = t.deleted
  return out
}

/** The price version stored on an event priced with this tool. */
export function toolPriceVersion(t: Tool): string {
  return `registry:${t.toolId}@${t.updated}#${t.revision}`
}
