import type { Redis } from 'ioredis'
import type { DeliveryClaims } from '../../ports/deliveries.js'
import type { Outage } from './connection.js'

/** The claim is kept as long as a delivery may be retried (webhook retries end within days). */
const CLAIM_TTL_MS = 14 * 86_400_000

/**
 * One delivery per endpoint and event for the cluster: before its first attempt a delivery
 * claims `wh:<configId>:<eventId>` (SET NX); a delivery of the same event to the same endpoint
 * queued by another replica finds the claim taken and is not sent. The delivery holding the
 * claim may retry as often as it needs (the claim is its own id).
 */
export class RedisDeliveryClaims implements DeliveryClaims {
  constructor(private readonly redis: Redis, private readonly prefix: string, private readonly outage: Outage) {}

  async claim(configId: string, eventId: string, deliveryId: string): Promise<boolean> {
    const key = `${this.prefix}wh:${configId}\0${eventId}`
    return this.outage.guard(async () => {
      if ((await this.redis.set(key, deliveryId, 'PX', CLAIM_TTL_MS, 'NX')) === 'OK') return true
      return (await this.redis.get(key)) === deliveryId
    })
  }
}
