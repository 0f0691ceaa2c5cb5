import type { Route } from '../../transport/http/server.js'

/**
 * `GET /v2/sdk/resolve-key` (platform bucket, any valid key): the setup tools' key check
 * (wire-contract §2.1). Answers who the key is — never the key itself. `teamId` and `tenantId`
 * repeat `team` and `tenant` under the names the platform clients use in queries.
 */
export const resolveKeyRoute: Route = {
  method: 'GET',
  path: '/v2/sdk/resolve-key',
  bucket: 'platform',
  scope: null,
  handler: (ctx) => {
    const p = ctx.principal!
    return {
      status: 200,
      body: {
        keyId: p.keyId,
        account: p.account,
        tenant: p.tenant,
        team: p.team,
        environment: p.environment,
        scopes: p.scopes,
        teamId: p.team,
        tenantId: p.tenant,
      },
      headers: { 'cache-control': 'no-store' },
    }
  },
}
