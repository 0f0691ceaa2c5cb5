import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { PACKAGE_ROOT } from '../core/paths.js'
import { StartupError } from '../core/startup-error.js'
import { USAGE_KINDS } from '../model/usage-record.js'
import { CONFIG_OPTION, EX_CONFIG, EX_IOERR, EX_USAGE, ExitError, UsageError, defineCommand, parseCommandArgs, synopsis, usageOf, wantsHelp, type Command } from './command.js'
import { WEBHOOK_COMMANDS } from './webhook.js'
import { DOCTOR_HELP, doctorCommand } from './doctor.js'

/*
 * The command line: parsing, usage, help and the table of commands need only light modules, so
 * `meterd --help` or a wrong flag answers at once. A command's implementation (and with it the
 * components, the store, the daemon) is loaded with import() when it runs.
 */

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

const RUN = defineCommand({
  name: 'run',
  summary: 'start the daemon (the default command)',
  details: 'Exits 78 with one line naming the cause and the fix when the config is bad or a port, address or data directory cannot be used.',
  options: CONFIG_OPTION,
  async run(v) {
    daemon = true
    return (await import('./run.js')).run(v.config ?? [])
  },
})

const VALIDATE = defineCommand({
  name: 'validate',
  summary: 'check a config as `run` does before it listens (schemas, graph, files, extensions, endpoints), starting nothing; exit 78 when it is bad',
  options: CONFIG_OPTION,
  async run(v) {
    const { configOrExit } = await import('./config.js')
    configOrExit(v.config ?? [], { toRun: true })
    process.stdout.write('meterd: the config is valid\n')
    return 0
  },
})

const PRINT_CONFIG = defineCommand({
  name: 'print-config',
  summary: 'print the merged config with every default filled in, components included',
  options: CONFIG_OPTION,
  run: async (v) => (await import('./config.js')).printConfig(v.config ?? []),
})

const COMPONENTS = defineCommand({
  name: 'components',
  summary: 'list the receivers, processors, exporters, connectors and extensions this build knows',
  options: {},
  run: async () => (await import('./config.js')).listComponents(),
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

const KEYS_CREATE: Command = defineCommand({
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
  run: async (v) => (await import('./keys.js')).createKey(v, KEYS_CREATE),
})

const KEYS_LIST = defineCommand({
  name: 'keys list',
  summary: 'list the API keys of the data directory (never the keys themselves)',
  options: { json: { type: 'boolean', help: 'print a JSON array' }, ...CONFIG_OPTION },
  run: async (v) => (await import('./keys.js')).listKeys(v),
})

const KEYS_REVOKE: Command = defineCommand({
  name: 'keys revoke',
  positionals: 'KEY_ID',
  maxPositionals: 1,
  summary: 'revoke a key by its id (see keys list); the running daemon refuses it within 10 ms',
  options: CONFIG_OPTION,
  run: async (v, [id]) => (await import('./keys.js')).revokeKey(v, id, KEYS_REVOKE),
})

const DOCTOR = defineCommand({
  name: 'doctor',
  summary: 'check a data directory offline; exit 0 when sound, 65 when damaged or missing',
  details: DOCTOR_HELP.split('\n').slice(1).join('\n').trim(),
  options: { 'data-dir': { type: 'string', arg: 'DIR', help: "the data directory (default: the config's storage.path)" }, ...CONFIG_OPTION },
  async run(v) {
    const dir = v['data-dir'] ?? (await import('./config.js')).configOrExit(v.config ?? []).config.storage.path
    return doctorCommand(dir, (line) => process.stdout.write(line + '\n'))
  },
})

const REPRICE: Command = defineCommand({
  name: 'reprice',
  summary: 'price the stored records that were stored unpriced (their model or tool was unknown then); safe beside a running daemon',
  options: {
    ...CONFIG_OPTION,
    from: { type: 'string', arg: 'ISO', help: 'only records whose event time is at or after this date-time' },
    to: { type: 'string', arg: 'ISO', help: 'only records whose event time is before this date-time' },
    kind: { type: 'string', arg: 'KIND', help: `only this kind: ${USAGE_KINDS.join(', ')}` },
    team: { type: 'string', arg: 'TEAM', help: 'only this team' },
    'dry-run': { type: 'boolean', help: 'count what would be priced, change nothing' },
    json: { type: 'boolean', help: 'print the result as JSON' },
  },
  run: async (v) => (await import('./reprice.js')).repriceCommand(v, REPRICE),
})

const BACKUP: Command = defineCommand({
  name: 'backup',
  summary: 'copy a data directory, consistently, into a new directory while the daemon runs',
  details: `Copies the data directory (--data-dir, else storage.path of the config) into DIR, a new
directory, from one consistent read snapshot of data.mdb (LMDB's own copy), while a daemon goes on
writing: nothing needs to be stopped. master.key is copied with it when the data directory has one.
DIR is written as a hidden sibling first, read through (every page, as doctor reads a store) and
renamed into place once complete and flushed, so an interrupted or damaged backup leaves nothing
that looks like one. An existing, non-empty DIR is refused.
Nothing is written into the data directory (it is opened read-only, as by doctor).

Exit status: 0 written; 65 the data directory is missing, holds no store or is damaged (its
header pages, or a page of the copy); 73 DIR
exists and is not empty; 74 the backup could not be written (a full disk); 64 bad usage;
78 a bad config or a data directory this user may not open.`,
  options: {
    to: { type: 'string', arg: 'DIR', required: true, help: 'the new directory to write (it must not exist, or be empty; required)' },
    'data-dir': { type: 'string', arg: 'DIR', help: "the data directory to copy (default: the config's storage.path)" },
    compact: { type: 'boolean', help: 'leave out the free pages (a smaller copy, slower to make)' },
    ...CONFIG_OPTION,
  },
  run: async (v) => (await import('./backup.js')).backupCommand(v, BACKUP),
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
  REPRICE,
  DOCTOR,
  BACKUP,
]
