import { ApiError, invalid } from '../../core/errors.js'
import { idTooLong, MAX_ID_LENGTH } from '../../model/identifiers.js'
import { isDateTime, toIsoUtc } from '../../model/schemas.js'
import type { RequestContext } from './server.js'

const MAX_PAGE_SIZE = 1000

/** `teamId` in a query must be the key's own team (DESIGN §4). */
export function checkTeam(ctx: RequestContext): string {
  const team = ctx.principal!.team
  const asked = ctx.query.get('teamId')
  if (asked !== null && asked !== '' && asked !== team)
    throw new ApiError(403, 'permission_error', 'team_mismatch', 'teamId does not match the team of the API key', { param: 'teamId' })
  return team
}

/** `page` (0-based) and `size` query parameters, checked. */
export function paging(ctx: RequestContext): { page: number; size: number } {
  const int = (name: string, def: number, min: number, max: number): number => {
    const v = ctx.query.get(name)
    if (v === null || v === '') return def
    const n = Number(v)
    // Digits only: Number() would also take 0x10, 1e3, +5 and " 5", which no client means as a page.
    if (!/^\d+$/.test(v) || n < min || n > max) throw invalid('invalid_parameter', `${name} must be an integer from ${min} to ${max}`, name)
    return n
  }
  return { page: int('page', 0, 0, 1_000_000), size: int('size', 20, 1, MAX_PAGE_SIZE) }
}

/** An identifier filter (transactionId, traceId, toolId), or undefined when absent; checked before any store sees it. */
export function idParam(ctx: RequestContext, name: string): string | undefined {
  const v = ctx.query.get(name)
  if (v === null || v === '') return undefined
  if (idTooLong(v)) throw invalid('invalid_parameter', `${name} must be at most ${MAX_ID_LENGTH} characters`, name)
  return v
}

/** An ISO-8601 query parameter as UTC ISO with milliseconds, or undefined when absent. */
export function timeParam(ctx: RequestContext, name: string): string | undefined {
  const v = ctx.query.get(name)
  if (v === null || v === '') return undefined
  if (!isDateTime(v)) throw invalid('invalid_parameter', `${name} must be an ISO-8601 date-time`, name)
  return toIsoUtc(v)
}

/**
 * The `from` and `to` query parameters (a range `[from, to)`), each optional; a range that ends
 * before it begins, or where it begins, is a 400 naming `to`, as the analytics queries answer it:
 * an empty page would hide a client's swapped bounds.
 */
export function timeRange(ctx: RequestContext): { from?: string; to?: string } {
  const from = timeParam(ctx, 'from')
  const to = timeParam(ctx, 'to')
  // Both are toISOString's spelling, so they compare as text.
  if (from !== undefined && to !== undefined && to <= from) throw invalid('invalid_parameter', 'to must be later than from', 'to')
  return { from, to }
}

/** A Spring HATEOAS page, the list shape real clients read (wire-contract §3.2). */
export function halPage(name: string, items: unknown[], total: number, page: number, size: number): unknown {
  return { _embedded: { [name]: items }, page: { size, totalElements: total, totalPages: Math.ceil(total / size), number: page } }
}
