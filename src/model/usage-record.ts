/**
 * The `usage` signal's item (DESIGN §2): one UsageRecord per AI completion or tool event.
 * `body` is the client's JSON object as sent (unknown keys kept verbatim, legacy aliases
 * dropped), so a record reads back field for field; everything meterd derives lives beside it.
 */

/** Image, audio and video generation or recognition, metered apart from completions (wire-contract §1.3). */
export type MediaKind = 'image' | 'audio' | 'video'
export const MEDIA_KINDS: readonly MediaKind[] = ['image', 'audio', 'video']
/** The path segment of each media kind: POST /meter/v2/ai/{segment}, GET …/sources/metrics/ai/{segment}. */
export const MEDIA_PATH: Record<MediaKind, string> = { image: 'images', audio: 'audio', video: 'video' }
export type UsageKind = 'completion' | 'tool' | MediaKind
export const USAGE_KINDS: readonly UsageKind[] = ['completion', 'tool', ...MEDIA_KINDS]

/** Kinds whose records carry a model, a provider and request times (a completion's core fields). */
export const isModelKind = (kind: UsageKind): kind is 'completion' | MediaKind => kind !== 'tool'

/** Who sent the record: stamped from the API key, never from the body. */
export interface Caller {
  account: string
  tenant: string
  team: string
  environment: string
  keyId: string
}

/** The attribution dimensions of DESIGN §2, normalised. Empty string = not given. */
export interface Attribution {
  organizationName: string
  productName: string
  subscriberId: string
  subscriberEmail: string
  subscriberCredentialName: string
  agent: string
  traceId: string
  workflowId: string
  taskType: string
  subscriptionId: string
  ticketId: string
  environment: string
  region: string
}

export type CostSource = 'client' | 'pricebook' | 'registry' | 'unpriced' | 'skipped'

/** Money as decimal strings (exact; see docs/pricing.md). */
export interface Cost {
  currency: 'USD'
  total: string
  parts: Record<string, string>
  source: CostSource
  /** The price-book or registry version used; a later price change never rewrites history. */
  priceVersion?: string
  /** Why a record is unpriced or skipped: unknown_model, unknown_tool, tool_disabled, a skipReason. */
  note?: string
  /** False when the record must not count in analytics (its tool was disabled); absent = true. */
  metered?: boolean
  /** Tool events: the quantity each pricing element's period aggregate moved by (decimal strings). */
  quantities?: Record<string, string>
}

export interface RecordMeta {
  /** Time-sortable id, answered to the client at 201. */
  id: string
  kind: UsageKind
  /** Event time (ISO, ms precision, UTC): requestTime for completions, timestamp for tools. */
  eventTime: string
  /** When meterd received the record. */
  receivedAt: string
  caller: Caller
  attribution: Attribution
  /** False when SPEC's required attribution (organizationName/productName) is missing. */
  attributed: boolean
  cost?: Cost
}

export interface CompletionBody {
  model: string
  provider: string
  inputTokenCount: number | null
  outputTokenCount: number | null
  totalTokenCount: number | null
  stopReason: string
  requestTime: string
  completionStartTime: string
  responseTime: string
  requestDuration: number
  transactionId?: string
  [field: string]: unknown
}

export interface ToolEventBody {
  toolId: string
  timestamp: string
  transactionId?: string
  usageMetadata?: Record<string, unknown>
  [field: string]: unknown
}

/**
 * `POST /meter/v2/ai/images|audio|video`: a completion's core fields with token counts null or
 * absent, plus what the provider bills by — images, characters, seconds.
 */
export interface MediaBody {
  model: string
  provider: string
  inputTokenCount?: number | null
  outputTokenCount?: number | null
  totalTokenCount?: number | null
  requestTime: string
  responseTime: string
  requestDuration: number
  transactionId?: string
  requestedImageCount?: number | null
  actualImageCount?: number | null
  characterCount?: number | null
  durationSeconds?: number | null
  requestedDurationSeconds?: number | null
  billingUnit?: string | null
  attributes?: Record<string, unknown> | null
  [field: string]: unknown
}

export interface MediaRecord extends RecordMeta {
  kind: MediaKind
  body: MediaBody
}

export interface CompletionRecord extends RecordMeta {
  kind: 'completion'
  body: CompletionBody
}

export interface ToolRecord extends RecordMeta {
  kind: 'tool'
  body: ToolEventBody
}

export type UsageRecord = CompletionRecord | ToolRecord | MediaRecord

/** A fresh attribution with every dimension empty (an object literal: cheaper than spreading EMPTY_ATTRIBUTION, per record). */
export function emptyAttribution(): Attribution {
  return {
    organizationName: '',
    productName: '',
    subscriberId: '',
    subscriberEmail: '',
    subscriberCredentialName: '',
    agent: '',
    traceId: '',
    workflowId: '',
    taskType: '',
    subscriptionId: '',
    ticketId: '',
    environment: '',
    region: '',
  }
}

export const EMPTY_ATTRIBUTION: Readonly<Attribution> = Object.freeze(emptyAttribution())

/** The `label` and `resourceType` a metering POST answers with (wire-contract §2.5). */
export const LABELS: Record<UsageKind, string> = { completion: 'ai.completion', tool: 'tool.event', image: 'ai.image', audio: 'ai.audio', video: 'ai.video' }
