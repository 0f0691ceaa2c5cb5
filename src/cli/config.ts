import { stringify } from 'yaml'
import { FACTORIES } from '../components.js'
import { SECTION, componentType } from '../host/component.js'
import { resolveConfig, type Resolved } from '../host/resolve.js'
import type { ConfigIssue, MeterdConfig } from '../core/config/schema.js'
import { factoryMap, runnableIssues } from '../host/graph.js'
import { EX_CONFIG, ExitError } from './command.js'

/**
 * The config as the commands see it, and the commands that show it. This loads every component's
 * descriptor (components.js: schemas and checks, no implementation), so main.ts imports it only
 * when a command needs the config.
 */

/** The merged, checked config, or exit 78 with every issue on stderr. */
export function configOrExit(files: string[], opts: { toRun?: boolean } = {}): Resolved {
  const resolved = resolveConfig(files, factoryMap(FACTORIES))
  if (opts.toRun && !resolved.issues.length) resolved.issues.push(...runnableIssues(resolved.config), ...workerIssues(resolved.config))
  if (resolved.issues.length) {
    process.stderr.write(`meterd: the config is not valid (${resolved.issues.length} error${resolved.issues.length > 1 ? 's' : ''}):\n`)
    for (const i of resolved.issues) process.stderr.write(`  ${i.path}: ${i.message}\n`)
    throw new ExitError('', EX_CONFIG)
  }
  return resolved
}

/** `server.workers` against the components: an `upstream` exporter (a sidecar) has one sender per queue. */
function workerIssues(config: MeterdConfig): ConfigIssue[] {
  const single = Object.keys(config.exporters ?? {}).filter((id) => componentType(id) === 'upstream')
  if (single.length === 0 || config.server.workers === 'auto' || config.server.workers === 1) return []
  return [{ path: 'server.workers', message: `${config.server.workers} cannot run exporter ${single[0]} (upstream): its queue has one sender; set server.workers to 1 or auto` }]
}

/** `meterd print-config`. */
export function printConfig(files: string[]): number {
  const { config, plan } = configOrExit(files)
  // The components as they will run: their own schema's defaults filled in.
  const out = structuredClone(config) as unknown as Record<string, Record<string, unknown>>
  for (const c of plan.components.values()) out[SECTION[c.kind]][c.id] = c.config
  process.stdout.write(stringify(redact(out)))
  return 0
}

/** Config keys whose values are secrets: print-config shows that one is set, never what it is. */
const SECRET_KEYS = new Set(['master_key', 'bootstrap_key', 'api_key', 'password'])

/** The config with its secrets hidden, and the password of every URL (redis://:pass@host). */
function redact(value: unknown, key = ''): unknown {
  if (typeof value === 'string') {
    if (SECRET_KEYS.has(key) && value !== '') return '<redacted>'
    return value.replace(/^([a-z][a-z0-9+.-]*:\/\/[^/@:]*:)[^/@]+@/i, '$1<redacted>@')
  }
  if (Array.isArray(value)) return value.map((v) => redact(v))
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redact(v, k)]))
  return value
}

/** `meterd components`. */
export function listComponents(): number {
  for (const kind of ['receiver', 'processor', 'exporter', 'connector', 'extension'] as const) {
    process.stdout.write(`${kind}s:\n`)
    for (const f of FACTORIES.filter((f) => f.kind === kind)) {
      const signals = 'signals' in f ? ` [${f.signals.join(', ')}]` : 'connects' in f ? ` [${f.connects.map(([a, b]) => `${a}→${b}`).join(', ')}]` : ''
      process.stdout.write(`  ${f.type.padEnd(14)} ${f.description}${signals}\n`)
    }
  }
  return 0
}
