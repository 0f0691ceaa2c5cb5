/** The words of SPEC's Export configuration and Events sections, as meterd stores them. */

/** Event types a configuration can subscribe to (`test` is sent on demand, never subscribed). */
export const EVENT_TYPES = ['usage.completion', 'usage.tool', 'usage.image', 'usage.audio', 'usage.video', 'alert.triggered', 'alert.resolved'] as const
/** What a configuration created without eventTypes subscribes to: every usage event. */
export const USAGE_EVENT_TYPES = ['usage.completion', 'usage.tool', 'usage.image', 'usage.audio', 'usage.video'] as const
export type SubscribableEventType = (typeof EVENT_TYPES)[number]
export type EventType = SubscribableEventType | 'usage.batch' | 'test'

/** Attribution filters: a record matches when, for every filter given, its value is one of the listed. */
export const FILTER_FIELDS = ['organizationName', 'productName', 'agent', 'subscriberId', 'environment', 'traceId', 'model', 'provider', 'toolId'] as const
export type FilterField = (typeof FILTER_FIELDS)[number]
export type Filters = Partial<Record<FilterField, string[]>>

export interface Batching {
  /** Deliver a `usage.batch` as soon as this many events are waiting. */
  maxEvents: number
  /** …or when the oldest waiting event is this old. */
  maxWaitMs: number
}

/** An export configuration (webhook) as stored; its signing secrets live apart (SigningState). */
export interface ExportConfiguration {
  id: string
  team: string
  name: string
  url: string
  enabled: boolean
  eventTypes: SubscribableEventType[]
  filters: Filters
  batching: Batching | null
  /** Per-attempt timeout; null = the engine's default. */
  timeoutMs: number | null
  /** Why meterd disabled it (e.g. the endpoint answered 410). */
  disabledReason?: string
  createdAt: string
  updatedAt: string
}

/** The body of a delivery. */
export interface WebhookEvent {
  id: string
  type: EventType
  created: string
  teamId: string
  data: unknown
}

export type DeliveryStatus = 'pending' | 'succeeded' | 'failed' | 'dead_lettered'

export interface DeliveryAttempt {
  attempt: number
  at: string
  durationMs: number
  /** The receiver's HTTP status, when it answered. */
  statusCode?: number
  error?: string
  succeeded: boolean
}

/** One event on its way to one configuration's URL. */
export interface Delivery {
  id: string
  eventId: string
  eventType: EventType
  configId: string
  team: string
  /** The event's JSON, fixed at enqueue: every attempt sends the same bytes, signed afresh. */
  body: string
  status: DeliveryStatus
  attemptCount: number
  /** The latest attempts (bounded). */
  attempts: DeliveryAttempt[]
  /** ms since epoch of the next attempt while pending. */
  nextAttemptAt?: number
  lastError?: string
  createdAt: number
  updatedAt: number
}

/** What the delivery engine needs from wherever configurations live. */
export interface ConfigurationSource {
  get(id: string): ExportConfiguration | undefined
  /** The secrets to sign with now (newest first), or undefined when signing is off. */
  signingSecrets(id: string, now: number): string[] | undefined
  /** Disables a configuration (e.g. the endpoint answered 410 Gone). */
  disable(id: string, reason: string): Promise<void>
}
