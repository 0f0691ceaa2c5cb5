/** Ends with `Z` or a numeric offset (`+01:00`, `-0500`, `+01`). */
const OFFSET = /(?:[Zz]|[+-]\d{2}(?::?\d{2})?)$/

/**
 * A date-time (already checked to be one) with `Z` added when it names no offset: DESIGN takes
 * timestamps "with or without fractions or offset", and one without is UTC, as the wire's are
 * (Python's `datetime.utcnow().isoformat()`). Date.parse would read it as the host's local time.
 */
export function withUtcDefault(v: string): string {
  return OFFSET.test(v) ? v : v + 'Z'
}
