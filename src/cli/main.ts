import cluster from 'node:cluster'
import { parseArgs } from 'node:util'
import { AggregatorRegistry } from 'prom-client'
import { stringify } from 'yaml'
import { FACTORIES } from '../components.js'
import { resolveConfig } from '../core/config/resolve.js'
import { factoryMap } from '../core/graph.js'
import { componentType } from '../core/component.js'
import { Service } from '../core/service.js'
import { broadcast, supervise, workerCount } from '../core/cluster/supervisor.js'
import { WorkerBus } from '../core/cluster/worker-bus.js'
import type { MeterdConfig, SharedStateConfig } from '../core/config/schema.js'
import { createTelemetry } from '../core/telemetry.js'
import { LeaseTable } from '../extensions/ratelimit/cluster.js'
import { Store } from '../store/store.js'
import { surviveCommitFailures } from '../store/commit-failures.js'
import { acquireDataDirLock } from '../store/lock.js'
import { checkDataFile } from '../store/check.js'
import { KeyStore, parseScopes } from '../extensions/apikeys/key-store.js'
import type { SharedState } from '../ports/shared.js'
import { WEBHOOK_USAGE, webhookCommand } from './webhook.js'
import { REPRICE_USAGE, repriceCommand } from './reprice.js'
import { DOCTOR_HELP, DOCTOR_USAGE, doctorCommand } from './doctor.js'

/** sysexits.h EX_CONFIG: what `validate` and `run` exit with on a bad config. */
export const EX_CONFIG = 78
const EX_USAGE = 64

const USAGE = `usage: meterd [command] [--config FILE ...]

commands:
  run            start the daemon (the default)
  validate       check a config without starting anything; exit 78 when it is bad
  print-config   print the merged, defaulted config
  components     list the component types this build knows
  docs           print the configuration reference (Markdown) generated from the schemas
  keys create --team T --scopes S[,S...] [--account A] [--tenant T] [--environment E] [--name N] [--json]
  keys list [--json]
  keys revoke KEY_ID
${WEBHOOK_USAGE}
${REPRICE_USAGE}
${DOCTOR_USAGE}

Without --config, the embedded config/meterd.yaml is used.`

export async function main(argv: string[]): Promise<void> {
  const [first, ...rest] = argv
  const command = first && !first.startsWith('-') ? first : 'run'
  const args = command === first ? rest : argv
  try {
    process.exitCode = await dispatch(command, args)
  } catch (err) {
    if ((err as Error).message) process.stderr.write(`meterd: ${(err as Error).message}\n`)
    process.exitCode = (err as { exitCode?: number }).exitCode ?? 1
  }
}

class UsageError extends Error {
  exitCode = EX_USAGE
}

function options(args: string[], extra: Record<string, { type: 'string' | 'boolean'; multiple?: boolean }> = {}) {
  try {
    return parseArgs({ args, allowPositionals: true, options: { config: { type: 'string', multiple: true, short: 'c' }, help: { type: 'boolean', short: 'h' }, ...extra } })
  } catch (err) {
    throw new UsageError(`${(err as Error).message}\n${USAGE}`)
  }
}

function configOrExit(files: string[]) {
  const resolved = resolveConfig(files, factoryMap(FACTORIES))
  if (resolved.issues.length) {
    process.stderr.write(`meterd: the config is not valid (${resolved.issues.length} error${resolved.issues.length > 1 ? 's' : ''}):\n`)
    for (const i of resolved.issues) process.stderr.write(`  ${i.path}: ${i.message}\n`)
    throw Object.assign(new Error(''), { exitCode: EX_CONFIG })
  }
  return resolved
}

async function dispatch(command: string, args: string[]): Promise<number> {
  switch (command) {
    case 'run': {
      const { values } = options(args)
      if (values.help) return help()
      return run(values.config ?? [])
    }
    case 'validate': {
      const { values } = options(args)
      configOrExit(values.config ?? [])
      process.stdout.write('meterd: the config is valid\n')
      return 0
    }
    case 'print-config': {
      const { values } = options(args)
      process.stdout.write(stringify(configOrExit(values.config ?? []).config))
      return 0
    }
    case 'components': {
      for (const kind of ['receiver', 'processor', 'exporter', 'connector', 'extension'] as const) {
        process.stdout.write(`${kind}s:\n`)
        for (const f of FACTORIES.filter((f) => f.kind === kind)) {
          const signals = 'signals' in f ? ` [${f.signals.join(', ')}]` : 'connects' in f ? ` [${f.connects.map(([a, b]) => `${a}→${b}`).join(', ')}]` : ''
          process.stdout.write(`  ${f.type.padEnd(14)} ${f.description}${signals}\n`)
        }
      }
      return 0
    }
    case 'docs': process.stdout.write((await import('./docs.js')).renderConfigReference()); return 0
    case 'webhook':
      return webhookCommand(args)
    case 'keys':
      return keys(args)
    case 'reprice':
      return repriceCommand(args, configOrExit)
    case 'doctor': {
      let values
      try {
        ;({ values } = parseArgs({ args, options: { config: { type: 'string', multiple: true, short: 'c' }, help: { type: 'boolean', short: 'h' }, 'data-dir': { type: 'string' } } }))
      } catch (err) {
        throw new UsageError(`${(err as Error).message}\n${DOCTOR_HELP}`)
      }
      if (values.help) {
        process.stdout.write(DOCTOR_HELP + '\n')
        return 0
      }
      const dir = values['data-dir'] ?? configOrExit(values.config ?? []).config.storage.path
      return doctorCommand(dir, (line) => process.stdout.write(line + '\n'))
    }
    case 'help':
    case '--help':
      return help()
    default:
      throw new UsageError(`unknown command "${command}"\n${USAGE}`)
  }
}

function help(): number {
  process.stdout.write(USAGE + '\n')
  return 0
}

async function run(files: string[]): Promise<number> {
  const { config, plan } = configOrExit(files)
  const workers = cluster.isWorker ? Number(process.env.METERD_WORKERS) : workersFor(config)
  if (cluster.isPrimary) {
    // One daemon per data directory: its primary takes the lock (never a worker, never a CLI command).
    const lock = acquireDataDirLock(config.storage.path)
    process.on('exit', () => lock.release())
    // A damaged data file is refused here, once, rather than by every worker as it starts.
    checkDataFile(config.storage.path)
  }
  if (cluster.isPrimary && workers > 1) return runSupervisor(config, workers)
  const bus = cluster.isWorker ? new WorkerBus(workers, Number(process.env.METERD_WORKER_INDEX)) : undefined
  const telemetry = createTelemetry({ level: config.service.telemetry.logs.level, bindings: bus ? { worker: bus.index } : undefined })
  if (bus) {
    // prom-client answers the supervisor's metrics requests from this registry.
    new AggregatorRegistry()
    AggregatorRegistry.setRegistries([telemetry.registry])
  }
  const service = new Service({ config, plan, telemetry, cluster: bus })
  // A failed commit (a full disk) is answered 503 and retried; lmdb-js's leftovers of it must not end the process.
  surviveCommitFailures((reason) => service.logger.debug({ err: reason }, 'a failed commit, already answered'))
  // Past a file-size limit (ulimit -f) writes fail with EFBIG, as on a full disk, instead of the signal killing the process.
  process.on('SIGXFSZ', () => undefined)
  let stopping = false
  const stop = (signal: string) => {
    if (stopping) {
      service.logger.warn({ signal }, 'second signal: exiting at once')
      process.exit(1)
    }
    stopping = true
    service.logger.info({ signal }, 'draining')
    service.shutdown().then(
      () => process.exit(0),
      (err) => {
        service.logger.error({ err }, 'shutdown failed')
        process.exit(1)
      },
    )
  }
  process.on('SIGTERM', () => stop('SIGTERM'))
  if (bus) {
    // A worker drains when its supervisor says so (SIGTERM) or goes away; Ctrl-C reaches the
    // whole process group, and the supervisor decides.
    process.on('SIGINT', () => undefined)
    process.on('disconnect', () => stop('disconnect'))
  } else {
    process.on('SIGINT', () => stop('SIGINT'))
  }
  try {
    await service.start()
  } catch (err) {
    service.logger.error({ err }, 'start failed')
    await service.shutdown().catch(() => undefined)
    return 1
  }
  bus?.ready()
  return await new Promise<number>(() => undefined) // runs until a signal
}

/**
 * How many workers: `auto` is one per core, except that a daemon with an `upstream` exporter
 * (a sidecar: one sender per queue) runs as one process; asking for more with one is a config error.
 */
function workersFor(config: MeterdConfig): number {
  const single = Object.keys(config.exporters ?? {}).filter((id) => componentType(id) === 'upstream')
  if (single.length === 0) return workerCount(config.server.workers)
  if (config.server.workers === 'auto' || config.server.workers === 1) return 1
  process.stderr.write(`meterd: server.workers: ${config.server.workers} cannot run exporter ${single[0]} (upstream): its queue has one sender; set server.workers to 1 or auto\n`)
  throw Object.assign(new Error(''), { exitCode: EX_CONFIG })
}

/** The primary of a daemon with several workers: it serves nothing itself (core/cluster/supervisor.ts). */
async function runSupervisor(config: MeterdConfig, workers: number): Promise<number> {
  const { logger } = createTelemetry({ level: config.service.telemetry.logs.level, bindings: { worker: 'supervisor' } })
  const leases = new LeaseTable(workers)
  const code = await supervise({
    workers,
    logger,
    shutdownTimeoutMs: config.server.shutdown_timeout_ms,
    answers: leases.answers(broadcast),
    onReady: () => logger.info({ workers }, 'every worker is ready'),
  })
  logger.info({ code }, 'meterd stopped')
  logger.flush?.()
  process.exit(code)
}

async function keys(args: string[]): Promise<number> {
  const [sub, ...rest] = args
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: {
    config: { type: 'string', multiple: true, short: 'c' },
    team: { type: 'string' },
    scopes: { type: 'string' },
    account: { type: 'string' },
    tenant: { type: 'string' },
    environment: { type: 'string' },
    name: { type: 'string' },
    json: { type: 'boolean' },
    },
  })
  const { config } = configOrExit(values.config ?? [])
  const store = new Store({ path: config.storage.path, maxSizeMb: config.storage.max_size_mb })
  const ks = new KeyStore(store)
  // Gateway cluster: the change goes to every replica at once (docs/deployment.md).
  const shared = config.server.shared_state.backend === 'redis' ? await openSharedState(config.server.shared_state.redis, store) : undefined
  if (shared) await ks.share(shared.tables)
  try {
    switch (sub) {
      case 'create': {
        if (!values.team) throw new UsageError('keys create needs --team')
        if (!values.scopes) throw new UsageError('keys create needs --scopes (metering:write, analytics:read, platform:read, platform:write, admin)')
        let scopes
        try {
          scopes = parseScopes(values.scopes)
        } catch (err) {
          throw new UsageError((err as Error).message)
        }
        const { key, record, account } = await ks.create({
          team: values.team,
          scopes,
          account: values.account,
          tenant: values.tenant,
          environment: values.environment,
          name: values.name,
        })
        const how = { given: '', team: ` (the account of team ${record.team})`, default: ' (the default; choose one with --account)' }[account]
        if (values.json) process.stdout.write(JSON.stringify({ key, ...record, accountChosen: account }) + '\n')
        else process.stdout.write(`${key}\n# id ${record.id}, account ${record.account}${how}, team ${record.team}, scopes ${record.scopes.join(',')}; shown only once\n`)
        return 0
      }
      case 'list': {
        const list = ks.list()
        if (values.json) process.stdout.write(JSON.stringify(list) + '\n')
        else
          for (const k of list)
            process.stdout.write(`${k.id}  ${k.prefix}…  account=${k.account} team=${k.team} env=${k.environment} scopes=${k.scopes.join(',')}${k.revoked ? ' REVOKED' : ''}  ${k.name}\n`)
        return 0
      }
      case 'revoke': {
        const id = positionals[0]
        if (!id) throw new UsageError('keys revoke needs a key id (see keys list)')
        if (!(await ks.revoke(id))) {
          process.stderr.write(`meterd: no key with id ${id}\n`)
          return 1
        }
        process.stdout.write(`revoked ${id}\n`)
        return 0
      }
      default:
        throw new UsageError(`keys: unknown subcommand "${sub ?? ''}"\n${USAGE}`)
    }
  } finally {
    await shared?.close()
    await store.close()
  }
}

async function openSharedState(redis: SharedStateConfig['redis'], store: Store): Promise<SharedState> {
  const { openRedisSharedState } = await import('../store/redis/index.js')
  const { logger, registry } = createTelemetry({ level: 'warn' })
  return openRedisSharedState(redis, store, logger, registry)
}
