import { parseArgs } from 'node:util'

/** sysexits.h: the exit codes meterd's commands use besides 0 and 1. */
export const EX_USAGE = 64
export const EX_CONFIG = 78
/** An error while writing a file: the data directory's disk is full. */
export const EX_IOERR = 74
/** An output a command was told to create cannot be: it exists already (`backup --to`). */
export const EX_CANTCREAT = 73

/** A wrong command line: answered with the command's usage and exit 64. */
export class UsageError extends Error {
  readonly exitCode = EX_USAGE
  constructor(message: string, readonly command?: Command) {
    super(message)
  }
}

/** A failure whose message is already said (or is one line for stderr), with its exit code. */
export class ExitError extends Error {
  constructor(message: string, readonly exitCode: number) {
    super(message)
  }
}

export interface OptionSpec {
  type: 'string' | 'boolean'
  multiple?: boolean
  short?: string
  /** The value's placeholder in the usage text (`FILE`, `ISO`); strings only. */
  arg?: string
  /** Shown without brackets in the usage line; the command checks it (with its own message). */
  required?: boolean
  help: string
}

export type Options = Record<string, OptionSpec>

type Values<O extends Options> = {
  [K in keyof O]?: O[K]['type'] extends 'boolean' ? (O[K]['multiple'] extends true ? boolean[] : boolean) : O[K]['multiple'] extends true ? string[] : string
}

/**
 * One command of the CLI: its name (`keys create`), what it does, its options and positionals,
 * and what it runs. The usage text is made from these, so `--help`, a wrong flag and the
 * command list always say the same thing.
 */
export interface Command<O extends Options = Options> {
  name: string
  /** Positional arguments in the usage line, e.g. `KEY_ID`. */
  positionals?: string
  /** How many positionals it takes at most (default 0). */
  maxPositionals?: number
  summary: string
  /** More lines shown by --help. */
  details?: string
  options: O
  run(values: Values<O>, positionals: string[]): Promise<number>
}

/** Options every command that reads the config takes. */
export const CONFIG_OPTION = {
  config: { type: 'string', multiple: true, short: 'c', arg: 'FILE', help: 'a config file; several are deep-merged in order (default: the embedded config/meterd.yaml)' },
} as const satisfies Options

export function defineCommand<O extends Options>(c: Command<O>): Command {
  return c as unknown as Command
}

export function synopsis(c: Command): string {
  const opts = Object.entries(c.options).map(([name, o]) => {
    const flag = `--${name}${o.type === 'string' ? ` ${o.arg ?? 'VALUE'}` : ''}`
    return `${o.required ? flag : `[${flag}]`}${o.multiple ? '...' : ''}`
  })
  return ['meterd', c.name, c.positionals, ...opts].filter(Boolean).join(' ')
}

export function usageOf(c: Command): string {
  const lines = [`usage: ${synopsis(c)}`, '', c.summary]
  if (c.details) lines.push('', c.details)
  const opts = Object.entries(c.options)
  lines.push('', 'options:')
  const flags = opts.map(([name, o]) => `${o.short ? `-${o.short}, ` : '    '}--${name}${o.type === 'string' ? ` ${o.arg ?? 'VALUE'}` : ''}`)
  flags.push('-h, --help')
  const width = Math.max(...flags.map((f) => f.length)) + 2
  opts.forEach(([, o], i) => lines.push(`  ${flags[i].padEnd(width)}${o.help}`))
  lines.push(`  ${'-h, --help'.padEnd(width)}this text`)
  return lines.join('\n')
}

/** True when the arguments ask for help (before any `--`). */
export function wantsHelp(args: string[]): boolean {
  for (const a of args) {
    if (a === '--') return false
    if (a === '--help' || a === '-h') return true
  }
  return false
}

/** Parses a command's arguments; a wrong one is a UsageError in our words, never the parser's. */
export function parseCommandArgs(c: Command, args: string[]): { values: Record<string, unknown>; positionals: string[] } {
  const options = Object.fromEntries(
    Object.entries(c.options).map(([name, o]) => [name, { type: o.type, ...(o.multiple ? { multiple: true } : {}), ...(o.short ? { short: o.short } : {}) }]),
  )
  let parsed
  try {
    parsed = parseArgs({ args, options, allowPositionals: true, strict: true })
  } catch (err) {
    throw new UsageError(parserProblem(err as NodeJS.ErrnoException, c), c)
  }
  const max = c.maxPositionals ?? 0
  if (parsed.positionals.length > max)
    throw new UsageError(`${c.name}: unexpected argument "${parsed.positionals[max]}"`, c)
  return { values: parsed.values as Record<string, unknown>, positionals: parsed.positionals }
}

function parserProblem(err: NodeJS.ErrnoException, c: Command): string {
  // Node names a flag with a short form as '-c, --config <value>': say the long one.
  const flag = /'(?:-[^-' ], )?(-[^' ]+)/.exec(err.message)?.[1] ?? ''
  switch (err.code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      return `${c.name}: unknown option ${flag}`
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE':
      // 'argument is ambiguous': the next word is a flag (`--port --secret x`), so this one has no value.
      return /argument missing|ambiguous/.test(err.message) ? `${c.name}: ${flag} needs a value` : `${c.name}: ${flag} takes no value`
    default:
      return `${c.name}: the arguments are not valid`
  }
}
