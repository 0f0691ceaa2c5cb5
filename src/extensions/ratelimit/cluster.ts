import type { ClusterBus } from '../../core/cluster/bus.js'
import type { Answer } from '../../core/cluster/supervisor.js'
import type { RateLimitBucket } from '../../transport/admission/index.js'
import type { CallerKey, ErrorPatternRules, Hit, RateLimitBackend } from './backend.js'
import { MemoryBackend } from './memory.js'

/**
 * Machine-wide exact limits for a daemon with several workers (issue 19 §1). The supervisor
 * owns every account's count per bucket and window and hands the workers *leases*: a worker
 * that has a lease admits from it without asking; when it runs out it asks for more. Leases
 * shrink as the window fills (half of what is left, shared by the workers, at least one), so
 * the sum of leases never exceeds the limit: 1,000/s means 1,000/s for the machine. What a
 * worker holds unused when its traffic stops is not given to the others until the next window
 * (at most 1/(2·workers) of what was left), so the machine may admit slightly fewer, never more.
 *
 * Error-pattern blocks are counted by the supervisor too: every 4xx is reported to it, and a
 * block it starts is published to every worker at once.
 */
export class ClusterBackend implements RateLimitBackend {
  private readonly leases = new Map<string, Lease>()
  private readonly blocks = new Map<CallerKey, number>()
  private readonly unsubscribe: () => void

  constructor(
    private readonly bus: ClusterBus,
    private readonly rules: ErrorPatternRules,
  ) {
    this.unsubscribe = bus.subscribe(BLOCK_TOPIC, (data) => {
      const { caller, until } = data as { caller: CallerKey; until: number }
      if (until > (this.blocks.get(caller) ?? 0)) this.blocks.set(caller, until)
    })
  }

  hit(caller: CallerKey, bucket: RateLimitBucket, window: number, limit: number, now: number): Hit | Promise<Hit> {
    const until = this.blockedUntil(caller, now)
    const key = `${caller}\0${bucket}`
    let lease = this.leases.get(key)
    if (lease === undefined || lease.window !== window) {
      if (this.leases.size > 10_000) this.sweep(window)
      lease = { window, left: 0, total: 0, exhausted: false }
      this.leases.set(key, lease)
    }
    if (until > now) return { count: lease.total - lease.left, blockedUntil: until }
    return this.take(lease, caller, bucket, limit)
  }

  blockedUntil(caller: CallerKey, now: number): number {
    const until = this.blocks.get(caller)
    if (until === undefined) return 0
    if (until > now) return until
    this.blocks.delete(caller)
    return 0
  }

  recordError(caller: CallerKey, now: number): void {
    this.bus.request(ERROR_TOPIC, { caller, now, rules: this.rules }).catch(() => undefined)
  }

  async close(): Promise<void> {
    this.unsubscribe()
    this.leases.clear()
  }

  private take(lease: Lease, caller: CallerKey, bucket: RateLimitBucket, limit: number): Hit | Promise<Hit> {
    if (lease.left > 0) {
      lease.left--
      return { count: lease.total - lease.left, blockedUntil: 0 }
    }
    if (lease.exhausted) return { count: limit + 1, blockedUntil: 0 }
    // Bounded by the bus (server.supervisor_timeout_seconds): past it, every request waiting here
    // gets the 503. The bus drops an answer it gave up on, so the supervisor counted a grant no
    // worker admits from: lost until the next window, like an unused lease (fewer, never more).
    lease.pending ??= this.bus
      .request<LeaseAnswer>(LEASE_TOPIC, { caller, bucket, window: lease.window, limit } satisfies LeaseRequest)
      .then((a) => {
        lease.left += a.grant
        lease.total = a.total
        if (a.grant === 0) lease.exhausted = true
      })
      .finally(() => (lease.pending = undefined))
    return lease.pending.then(() => this.take(lease, caller, bucket, limit))
  }

  private sweep(window: number): void {
    for (const [key, lease] of this.leases) if (lease.window < window) this.leases.delete(key)
  }
}

interface Lease {
  window: number
  /** Admissions left in this worker's lease. */
  left: number
  /** The machine-wide number leased in this window when this worker last asked. */
  total: number
  /** The supervisor said nothing is left in this window. */
  exhausted: boolean
  pending?: Promise<void>
}

const LEASE_TOPIC = 'ratelimit.lease'
const ERROR_TOPIC = 'ratelimit.error'
const BLOCK_TOPIC = 'ratelimit.block'

interface LeaseRequest {
  caller: CallerKey
  bucket: RateLimitBucket
  window: number
  limit: number
}

interface LeaseAnswer {
  grant: number
  total: number
}

/** The supervisor's side: the leases of every account, bucket and window, and the error-pattern state. */
export class LeaseTable {
  private readonly windows = new Map<string, { window: number; leased: number }>()
  private latest = 0
  private errors?: MemoryBackend

  constructor(private readonly workers: number) {}

  lease(req: LeaseRequest): LeaseAnswer {
    if (req.window > this.latest) {
      this.latest = req.window
      for (const [key, w] of this.windows) if (w.window < req.window - 1) this.windows.delete(key)
    }
    const key = `${req.caller}\0${req.bucket}\0${req.window}`
    let w = this.windows.get(key)
    if (w === undefined) this.windows.set(key, (w = { window: req.window, leased: 0 }))
    const left = req.limit - w.leased
    if (left <= 0) return { grant: 0, total: w.leased }
    const grant = Math.max(1, Math.min(left, Math.floor(left / (2 * this.workers))))
    w.leased += grant
    return { grant, total: w.leased }
  }

  /** Counts a 4xx; returns the block it started, if it started one. */
  error(req: { caller: CallerKey; now: number; rules: ErrorPatternRules }): { caller: CallerKey; until: number } | undefined {
    const errors = (this.errors ??= new MemoryBackend(req.rules))
    const before = errors.blockedUntil(req.caller, req.now)
    errors.recordError(req.caller, req.now)
    const until = errors.blockedUntil(req.caller, req.now)
    return until > before ? { caller: req.caller, until } : undefined
  }

  /** The supervisor's answers, given a way to publish to every worker. */
  answers(broadcast: (topic: string, data: unknown) => void): Record<string, Answer> {
    return {
      [LEASE_TOPIC]: (d) => this.lease(d as LeaseRequest),
      [ERROR_TOPIC]: (d) => {
        const block = this.error(d as { caller: CallerKey; now: number; rules: ErrorPatternRules })
        if (block) broadcast(BLOCK_TOPIC, block)
        return null
      },
    }
  }
}
