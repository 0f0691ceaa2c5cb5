import { ApiError } from '../../core/errors.js'
import type { Caller } from '../../model/usage-record.js'

/**
 * Body fields that would say who is calling. The caller's identity comes from its API key only
 * (DESIGN §4): a body may repeat it (the platform CLI sends its `teamId` in tool bodies, and
 * tool resources read back carry `team: {id}`), but never claim another.
 */
const IDENTITY_FIELDS = ['teamId', 'team', 'tenantId', 'tenant', 'account', 'accountId', 'keyId'] as const
type IdentityField = (typeof IDENTITY_FIELDS)[number]

function own(field: IdentityField, v: unknown, c: Caller): boolean {
  if (v === undefined || v === null || v === '') return true
  switch (field) {
    case 'teamId':
      return v === c.team
    case 'team':
      return v === c.team || (typeof v === 'object' && (v as { id?: unknown }).id === c.team)
    case 'tenantId':
    case 'tenant':
      return v === c.tenant
    case 'account':
    case 'accountId':
      return v === c.account
    case 'keyId':
      return v === c.keyId
  }
}

/**
 * The body without the identity fields that name the caller itself (they are dropped: the
 * stored record's identity is the key's); a field that names anyone else is a 403
 * (`team_mismatch` for the team, `identity_mismatch` for the others). `at` prefixes the
 * field in the error's `param` (`[2].` in a batch). A body without such fields (the usual
 * case) is returned as it is, nothing copied.
 */
export function withoutOwnIdentity<T>(body: T, caller: Caller, at = ''): T {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return body
  const b = body as Record<string, unknown>
  // The usual body names none of IDENTITY_FIELDS: one test per field with a constant name, so
  // each test stays monomorphic for bodies of one shape (the loop below, with its variable key,
  // goes megamorphic). Keep in step with IDENTITY_FIELDS.
  if (!('teamId' in b || 'team' in b || 'tenantId' in b || 'tenant' in b || 'account' in b || 'accountId' in b || 'keyId' in b)) return body
  let found = false
  for (const f of IDENTITY_FIELDS) {
    if (!(f in b)) continue
    found = true
    if (own(f, b[f], caller)) continue
    const team = f === 'teamId' || f === 'team'
    throw new ApiError(
      403,
      'permission_error',
      team ? 'team_mismatch' : 'identity_mismatch',
      `${at}${f} names another ${team ? 'team' : f.replace(/Id$/, '')} than the API key's; the caller's identity comes from its key (drop the field)`,
      { param: `${at}${f}` },
    )
  }
  if (!found) return body
  const out = { ...b }
  for (const f of IDENTITY_FIELDS) delete out[f]
  return out as T
}
