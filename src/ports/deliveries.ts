/** One delivery per (endpoint, event) for the whole cluster. */
export interface DeliveryClaims {
  /** True when this delivery may be sent: no other delivery of the event to the endpoint holds the claim. */
  claim(configId: string, eventId: string, deliveryId: string): Promise<boolean>
}
