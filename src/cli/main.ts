import cluster from 'node:cluster'
import { existsSync, readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { stringify } from 'yaml'
import { FACTORIES } from '../components.js'
import { SECTION, componentType } from '../host/component.js'
import { broadcast, supervise, workerCount } from '../core/cluster/supervisor.js'
import { WorkerBus } from '../core/cluster/worker-bus.js'
import { resolveConfig, type Resolved } from '../host/resolve.js'
import type { ConfigIssue, MeterdConfig, SharedStateConfig } from '../core/config/schema.js'
import { factoryMap, runnableIssues } from '../host/graph.js'
import { PACKAGE_ROOT } from '../core/paths.js'
import { Service } from '../host/service.js'
import { StartupError, dataDirFailure } from '../core/startup-error.js'
import { createTelemetry } from '../core/telemetry.js'
import { returnStartupMemoryWhileIdle } from '../core/idle-memory.js'
import { LeaseTable } from '../extensions/ratelimit/cluster.js'
import type { Store } from '../store/store.js'
import { quietLmdbWriteLoopErrors, surviveCommitFailures } from '../store/commit-failures.js'
import { DataDirLockedError, acquireDataDirLock } from '../store/lock.js'
import { DamagedStoreError, checkDataFile } from '../store/check.js'
import { KeyStore, checkLabels, parseScopes } from '../extensions/apikeys/key-store.js'
import type { SharedState } from '../ports/shared.js'
import { CONFIG_OPTION, EX_CONFIG, EX_IOERR, EX_USAGE, ExitError, UsageError, defineCommand, parseCommandArgs, synopsis, usageOf, wantsHelp, type Command } from './command.js'
import { WEBHOOK_COMMANDS } from './webhook.js'
import { REPRICE_COMMAND } from './reprice.js'
import { DOCTOR_HELP, doctorCommand } from './doctor.js'
import { BACKUP_COMMAND } from './backup.js'
import { withStore } from './store.js'

export { EX_CONFIG, EX_USAGE }

/** The daemon keeps serving when its stdout goes away (it logs to stderr); a command stops. */
let daemon = false

/**
 * The reader of stdout went away (`meterd doctor | head -1`: EPIPE) or its disk is full: Node
 * would throw an unhandled 'error' with a stack. A command ends as Unix tools do (128 + SIGPIPE)
 * or with one line and exit 74.
 */
function onStdoutError(err: NodeJS.ErrnoException): void {
  if (daemon) return
  if (err.code === 'EPIPE') process.exit(141)
  process.stderr.write(`meterd: cannot write the output: ${err.code ?? err.message}\n`)
  process.exit(EX_IOERR)
}

export async function main(argv: string[]): Promise<void> {
  process.stdout.on('error', onStdoutError)
  try {
    process.exitCode = await dispatch(argv)
  } catch (err) {
    process.exitCode = report(err)
    // A failed start may leave a handle behind (a half-bound gRPC server): do not wait for it.
    setTimeout(() => process.exit(), 500).unref()
  }
}

/** One line (or the config's issue list) on stderr; a usage error adds the command's usage. */
function report(err: unknown): number {
  if (err instanceof UsageError) {
    process.stderr.write(`meterd: ${err.message}\n\n${err.command ? usageOf(err.command) : globalUsage()}\n`)
    return err.exitCode
  }
  if (err instanceof StartupError || err instanceof ExitError) {
    if (err.message) process.stderr.write(`meterd: ${err.message}\n`)
    return err.exitCode
  }
  process.stderr.write(`meterd: ${(err as Error)?.message ?? String(err)}\n`)
  return (err as { exitCode?: number })?.exitCode ?? 1
}

async function dispatch(argv: string[]): Promise<number> {
  const [first, second] = argv
  if (first === '--version' || first === '-V' || first === 'version') return version()
  if (first === undefined || first.startsWith('-')) {
    if (first === '--help' || first === '-h') return help()
    return runCommand(RUN, argv)
  }
  if (first === 'help') {
    const c = second && (COMMANDS.find((c) => c.name === `${second} ${argv[2] ?? ''}`.trim()) ?? COMMANDS.find((c) => c.name === second))
    if (!c) return help()
    process.stdout.write(usageOf(c) + '\n')
    return 0
  }
  const two = COMMANDS.find((c) => second !== undefined && c.name === `${first} ${second}`)
  if (two) return runCommand(two, argv.slice(2))
  const one = COMMANDS.find((c) => c.name === first)
  if (one) return runCommand(one, argv.slice(1))
  const group = COMMANDS.filter((c) => c.name.startsWith(`${first} `))
  if (group.length) {
    const usage = group.map((c) => `usage: ${synopsis(c)}\n  ${c.summary}`).join('\n') + '\n'
    if (second === '--help' || second === '-h') {
      process.stdout.write(usage)
      return 0
    }
    if (second === undefined) {
      process.stderr.write(`meterd: ${first} needs a subcommand\n\n${usage}`)
      return EX_USAGE
    }
    throw new UsageError(`${first}: unknown subcommand "${second}" (${group.map((c) => c.name.split(' ')[1]).join(', ')})`)
  }
  throw new UsageError(`unknown command "${first}"`)
}

async function runCommand(c: Command, args: string[]): Promise<number> {
  if (wantsHelp(args)) {
    process.stdout.write(usageOf(c) + '\n')
    return 0
  }
  const { values, positionals } = parseCommandArgs(c, args)
  return c.run(values as never, positionals)
}

function globalUsage(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length)) + 2
  return [
    'usage: meterd [COMMAND] [OPTIONS]',
    '',
    'commands:',
    ...COMMANDS.map((c) => `  ${c.name.padEnd(width)}${c.summary}`),
    '',
    'Without a command, meterd runs the daemon. `meterd COMMAND --help` shows a command\'s options;',
    '`meterd --version` the version. Without --config, the embedded config/meterd.yaml is used.',
  ].join('\n')
}

function help(): number {
  process.stdout.write(globalUsage() + '\n')
  return 0
}

function version(): number {
  const pkg = JSON.parse(readFileSync(join(PACKAGE_ROOT, 'package.json'), 'utf8')) as { version: string }
  process.stdout.write(`meterd ${pkg.version} (node ${process.versions.node})\n`)
  return 0
}

/** The merged, checked config, or exit 78 with every issue on stderr. */
function configOrExit(files: string[], opts: { toRun?: boolean } = {}): Resolved {
  const resolved = resolveConfig(files, factoryMap(FACTORIES))
  if (opts.toRun && !resolved.issues.length) resolved.issues.push(...runnableIssues(resolved.config), ...workerIssues(resolved.config))
  if (resolved.issues.length) {
    process.stderr.write(`meterd: the config is not valid (${resolved.issues.length} error${resolved.issues.length > 1 ? 's' : ''}):\n`)
    for (const i of resolved.issues) process.stderr.write(`  ${i.path}: ${i.message}\n`)
    throw new ExitError('', EX_CONFIG)
  }
  return resolved
}

const RUN = defineCommand({
  name: 'run',
  summary: 'start the daemon (the default command)',
  details: 'Exits 78 with one line naming the cause and the fix when the config is bad or a port, address or data directory cannot be used.',
  options: CONFIG_OPTION,
  run: (v) => run(v.config ?? []),
})

async function run(files: string[]): Promise<number> {
  daemon = true
  const { config, plan } = configOrExit(files, { toRun: true })
  const workers = cluster.isWorker ? Number(process.env.METERD_WORKERS) : workersFor(config)
  if (cluster.isPrimary) {
    // One daemon per data directory: its primary takes the lock (never a worker, never a CLI command).
    let lock
    try {
      lock = acquireDataDirLock(config.storage.path)
    } catch (err) {
      throw err instanceof DataDirLockedError || err instanceof StartupError ? err : dataDirFailure(err, config.storage.path)
    }
    process.on('exit', () => lock.release())
    // A damaged data file is refused here, once, rather than by every worker as it starts.
    try {
      checkDataFile(config.storage.path)
    } catch (err) {
      // A data.mdb this user may not read (left by a start as root) is a permission to fix, not a crash.
      throw err instanceof DamagedStoreError || err instanceof StartupError ? err : dataDirFailure(err, config.storage.path)
    }
  }
  if (cluster.isPrimary && workers > 1) return runSupervisor(config, workers)
  const index = Number(process.env.METERD_WORKER_INDEX)
  const telemetry = createTelemetry({ level: config.service.telemetry.logs.level, bindings: cluster.isWorker ? { worker: index } : undefined })
  const warn = (message: string, err?: unknown) => telemetry.logger.warn({ err }, message)
  const peerDir = process.env.METERD_PEER_DIR
  if (cluster.isWorker && !peerDir) throw new ExitError('a worker needs METERD_PEER_DIR, which its supervisor sets', 1)
  const bus = cluster.isWorker ? new WorkerBus(workers, index, process, peerDir!, warn, config.server.supervisor_timeout_seconds) : undefined
  // The supervisor combines every ready worker's registry for /metrics.
  bus?.answer('metrics', () => telemetry.registry.getMetricsAsJSON())
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
    // SIGHUP (a closed terminal) reaches the whole process group too: the supervisor decides.
    process.on('SIGHUP', () => undefined)
    // A worker drains when its supervisor says so (SIGTERM) or goes away; Ctrl-C reaches the
    // whole process group, and the supervisor decides.
    process.on('SIGINT', () => undefined)
    process.on('disconnect', () => {
      // No supervisor is left to kill a worker whose drain hangs (it would after this long).
      setTimeout(() => process.exit(1), config.server.shutdown_timeout_ms + 2000).unref()
      stop('disconnect')
    })
    // node:cluster would instead end the worker at once when the channel closes unasked (its
    // documented guard, off when this is true), cutting every request in flight: those that hold
    // their rate-limit share are then stored and answered, those waiting for one get a 503.
    cluster.worker!.exitedAfterDisconnect = true
  } else {
    process.on('SIGINT', () => stop('SIGINT'))
    // Node's default for SIGHUP (a closed terminal, `kill -HUP` expecting a reload) ends the
    // process at once, cutting requests in flight and leaving meterd.pid: drain as for SIGTERM.
    process.on('SIGHUP', () => stop('SIGHUP'))
  }
  // A commit that fails while starting (the first admin key on a full disk) is said in one line
  // (startup-error.ts), not also with the stack lmdb-js prints for it.
  const loud = quietLmdbWriteLoopErrors()
  try {
    await bus?.open()
    await service.start()
  } catch (err) {
    // A cause the operator can fix is one line; anything else is logged with its stack as well.
    if (!(err instanceof StartupError)) service.logger.error({ err }, 'start failed')
    await service.shutdown().catch(() => undefined)
    service.logger.flush?.()
    if (err instanceof StartupError) throw err
    throw new ExitError(`start failed: ${(err as Error).message}`, 1)
  } finally {
    loud()
  }
  bus?.ready()
  returnStartupMemoryWhileIdle()
  return await new Promise<number>(() => undefined) // runs until a signal
}

/** `server.workers` against the components: an `upstream` exporter (a sidecar) has one sender per queue. */
function workerIssues(config: MeterdConfig): ConfigIssue[] {
  const single = Object.keys(config.exporters ?? {}).filter((id) => componentType(id) === 'upstream')
  if (single.length === 0 || config.server.workers === 'auto' || config.server.workers === 1) return []
  return [{ path: 'server.workers', message: `${config.server.workers} cannot run exporter ${single[0]} (upstream): its queue has one sender; set server.workers to 1 or auto` }]
}

/** How many workers: `auto` is one per core, except that a daemon with an `upstream` exporter (a sidecar) runs as one process. */
function workersFor(config: MeterdConfig): number {
  const single = Object.keys(config.exporters ?? {}).some((id) => componentType(id) === 'upstream')
  return single ? 1 : workerCount(config.server.workers)
}

/** The primary of a daemon with several workers: it serves nothing itself (core/cluster/supervisor.ts). */
async function runSupervisor(config: MeterdConfig, workers: number): Promise<number> {
  const { logger } = createTelemetry({ level: config.service.telemetry.logs.level, bindings: { worker: 'supervisor' }, defaultMetrics: false })
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

const VALIDATE = defineCommand({
  name: 'validate',
  summary: 'check a config as `run` does before it listens (schemas, graph, files, extensions, endpoints), starting nothing; exit 78 when it is bad',
  options: CONFIG_OPTION,
  async run(v) {
    configOrExit(v.config ?? [], { toRun: true })
    process.stdout.write('meterd: the config is valid\n')
    return 0
  },
})

const PRINT_CONFIG = defineCommand({
  name: 'print-config',
  summary: 'print the merged config with every default filled in, components included',
  options: CONFIG_OPTION,
  async run(v) {
    const { config, plan } = configOrExit(v.config ?? [])
    // The components as they will run: their own schema's defaults filled in.
    const out = structuredClone(config) as unknown as Record<string, Record<string, unknown>>
    for (const c of plan.components.values()) out[SECTION[c.kind]][c.id] = c.config
    process.stdout.write(stringify(redact(out)))
    return 0
  },
})

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

const COMPONENTS = defineCommand({
  name: 'components',
  summary: 'list the receivers, processors, exporters, connectors and extensions this build knows',
  options: {},
  async run() {
    for (const kind of ['receiver', 'processor', 'exporter', 'connector', 'extension'] as const) {
      process.stdout.write(`${kind}s:\n`)
      for (const f of FACTORIES.filter((f) => f.kind === kind)) {
        const signals = 'signals' in f ? ` [${f.signals.join(', ')}]` : 'connects' in f ? ` [${f.connects.map(([a, b]) => `${a}→${b}`).join(', ')}]` : ''
        process.stdout.write(`  ${f.type.padEnd(14)} ${f.description}${signals}\n`)
      }
    }
    return 0
  },
})

const DOCS = defineCommand({
  name: 'docs',
  summary: 'print the configuration reference (Markdown) generated from the schemas',
  options: {},
  async run() {
    process.stdout.write((await import('./docs.js')).renderConfigReference())
    return 0
  },
})

const KEYS_OPTIONS = {
  ...CONFIG_OPTION,
  init: { type: 'boolean', help: 'create the data directory if it holds no store yet (otherwise that is an error)' },
} as const

/**
 * The store of the config's data directory. A directory without a store is refused unless
 * `init`: a key written there would be one the daemon, reading another directory, never sees.
 */
async function withKeyStore<T>(files: string[], init: boolean | undefined, unwritten: string, fn: (ks: KeyStore) => Promise<T>): Promise<T> {
  const { config } = configOrExit(files)
  const path = config.storage.path
  if (!init && !existsSync(join(path, 'data.mdb'))) {
    const shown = path === resolve(path) ? path : `${path} (${resolve(path)})`
    throw new ExitError(
      `no data directory at ${shown} — is the daemon using another storage.path? Pass its --config or set METERD_DATA_DIR to its data directory (or --init to create a new one here)`,
      EX_CONFIG,
    )
  }
  return withStore({ path, maxSizeMb: config.storage.max_size_mb }, unwritten, async (store) => {
    const ks = new KeyStore(store)
    // Gateway cluster: the change goes to every replica at once (docs/deployment.md).
    const shared = config.server.shared_state.backend === 'redis' ? await openSharedState(config.server.shared_state.redis, store) : undefined
    try {
      if (shared) await ks.share(shared.tables)
      return await fn(ks)
    } finally {
      await shared?.close()
    }
  })
}

const KEYS_CREATE = defineCommand({
  name: 'keys create',
  summary: 'create an API key in the data directory (works beside a running daemon); prints the key once',
  options: {
    team: { type: 'string', arg: 'TEAM', required: true, help: 'the team the key acts for (required)' },
    scopes: { type: 'string', arg: 'S[,S...]', required: true, help: 'metering:write, analytics:read, platform:read, platform:write, admin (required)' },
    account: { type: 'string', arg: 'ACCOUNT', help: "the rate-limit account (default: the team's account, else `default`)" },
    tenant: { type: 'string', arg: 'TENANT', help: 'tenant label stamped on records (default `default`)' },
    environment: { type: 'string', arg: 'ENV', help: 'environment label stamped on records (default `production`)' },
    name: { type: 'string', arg: 'NAME', help: 'a note shown by keys list' },
    json: { type: 'boolean', help: 'print the key and its record as JSON' },
    ...KEYS_OPTIONS,
  },
  async run(v) {
    if (!v.team) throw new UsageError('keys create needs --team', KEYS_CREATE)
    if (!v.scopes) throw new UsageError('keys create needs --scopes', KEYS_CREATE)
    let scopes
    try {
      scopes = parseScopes(v.scopes)
      // A wrong --account or --tenant is bad usage (64), not a failure (1).
      checkLabels({ team: v.team, account: v.account, tenant: v.tenant, environment: v.environment })
    } catch (err) {
      throw new UsageError((err as Error).message, KEYS_CREATE)
    }
    return withKeyStore(v.config ?? [], v.init, 'no key was created', async (ks) => {
      const { key, record, account } = await ks.create({ team: v.team!, scopes, account: v.account, tenant: v.tenant, environment: v.environment, name: v.name })
      const how = { given: '', team: ` (the account of team ${record.team})`, default: ' (the default; choose one with --account)' }[account]
      if (v.json) process.stdout.write(JSON.stringify({ key, ...record, accountChosen: account }) + '\n')
      else process.stdout.write(`${key}\n# id ${record.id}, account ${record.account}${how}, team ${record.team}, scopes ${record.scopes.join(',')}; shown only once\n`)
      return 0
    })
  },
})

const KEYS_LIST = defineCommand({
  name: 'keys list',
  summary: 'list the API keys of the data directory (never the keys themselves)',
  options: { json: { type: 'boolean', help: 'print a JSON array' }, ...CONFIG_OPTION },
  run: (v) =>
    withKeyStore(v.config ?? [], false, 'the keys were not listed', async (ks) => {
      const list = ks.list()
      if (v.json) process.stdout.write(JSON.stringify(list) + '\n')
      else
        for (const k of list)
          process.stdout.write(`${k.id}  ${k.prefix}…  account=${k.account} team=${k.team} env=${k.environment} scopes=${k.scopes.join(',')}${k.revoked ? ' REVOKED' : ''}  ${k.name}\n`)
      return 0
    }),
})

const KEYS_REVOKE = defineCommand({
  name: 'keys revoke',
  positionals: 'KEY_ID',
  maxPositionals: 1,
  summary: 'revoke a key by its id (see keys list); the running daemon refuses it within 10 ms',
  options: CONFIG_OPTION,
  async run(v, [id]) {
    if (!id) throw new UsageError('keys revoke needs a key id (see keys list)', KEYS_REVOKE)
    return withKeyStore(v.config ?? [], false, 'the key was not revoked', async (ks) => {
      if (!(await ks.revoke(id))) throw new ExitError(`no key with id ${id}`, 1)
      process.stdout.write(`revoked ${id}\n`)
      return 0
    })
  },
})

const DOCTOR = defineCommand({
  name: 'doctor',
  summary: 'check a data directory offline; exit 0 when sound, 65 when damaged or missing',
  details: DOCTOR_HELP.split('\n').slice(1).join('\n').trim(),
  options: { 'data-dir': { type: 'string', arg: 'DIR', help: "the data directory (default: the config's storage.path)" }, ...CONFIG_OPTION },
  async run(v) {
    const dir = v['data-dir'] ?? configOrExit(v.config ?? []).config.storage.path
    return doctorCommand(dir, (line) => process.stdout.write(line + '\n'))
  },
})

/** Every command, in the order `meterd --help` lists them. Add a command here (and nowhere else). */
export const COMMANDS: Command[] = [
  RUN,
  VALIDATE,
  PRINT_CONFIG,
  COMPONENTS,
  DOCS,
  KEYS_CREATE,
  KEYS_LIST,
  KEYS_REVOKE,
  ...WEBHOOK_COMMANDS,
  REPRICE_COMMAND(configOrExit),
  DOCTOR,
  BACKUP_COMMAND(configOrExit),
]

async function openSharedState(redis: SharedStateConfig['redis'], store: Store): Promise<SharedState> {
  const { openRedisSharedState } = await import('../store/redis/index.js')
  const { logger, registry } = createTelemetry({ level: 'warn' })
  return openRedisSharedState(redis, store, logger, registry)
}
