import type { Factories, Plan } from './graph.js'
import { plan } from './graph.js'
import { ConfigError, loadConfigFiles } from '../core/config/load.js'
import { ConfigSchema, checkAgainst, type ConfigIssue, type MeterdConfig } from '../core/config/schema.js'

export interface Resolved {
  config: MeterdConfig
  plan: Plan
  issues: ConfigIssue[]
}

/** Files → merged, env-expanded, defaulted, schema-checked config and a checked graph plan. */
export function resolveConfig(files: string[], factories: Factories, env: NodeJS.ProcessEnv = process.env): Resolved {
  let raw: Record<string, unknown>
  try {
    raw = loadConfigFiles(files, env)
  } catch (err) {
    if (err instanceof ConfigError) return { config: undefined as never, plan: { components: new Map(), issues: [] }, issues: err.issues }
    throw err
  }
  const { value: config, issues } = checkAgainst(ConfigSchema, raw, '')
  if (issues.length) return { config, plan: { components: new Map(), issues: [] }, issues }
  for (const p of Object.values(config.service.pipelines)) p.processors ??= []
  const p = plan(config, factories)
  return { config, plan: p, issues: p.issues }
}
