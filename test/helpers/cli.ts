// Runs the meterd CLI as a user would, for the tests of the command line.
import { execFile, spawnSync } from 'node:child_process'
import { createServer, type Server } from 'node:net'
import { join } from 'node:path'
import { DEFAULT_CONFIG_PATH } from '../../src/core/config/load.js'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { writeConfig } from './meterd.js'
import { freePort } from './net.js'

const BIN = join(PACKAGE_ROOT, 'bin', 'meterd.js')

export interface Ran {
  code: number | null
  stdout: string
  stderr: string
}

/** Runs the CLI to its end (a daemon that starts is killed after `timeout` ms: code null). */
export function meterd(args: string[], opts: { env?: Record<string, string>; cwd?: string; timeout?: number; prefix?: string[] } = {}): Promise<Ran> {
  // `prefix`: a command that execs the command line given after it (`prlimit --fsize=…`).
  const [command, ...argv] = [...(opts.prefix ?? []), process.execPath, BIN, ...args]
  return new Promise((resolve) => {
    const child = execFile(
      command,
      argv,
      {
        cwd: opts.cwd,
        timeout: opts.timeout ?? 60_000,
        env: {
          ...process.env,
          METERD_OTLP_GRPC_ENDPOINT: '127.0.0.1:0',
          METERD_OTLP_HTTP_ENDPOINT: '127.0.0.1:0',
          METERD_ENDPOINT: '127.0.0.1:0',
          METERD_LOG_LEVEL: 'warn',
          ...opts.env,
        },
      },
      (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : null) : 0, stdout, stderr }),
    )
    child.stdin?.end()
  })
}

export function listening(): Promise<{ server: Server; port: number }> {
  return new Promise((resolve) => {
    const server = createServer()
    server.listen(0, '127.0.0.1', () => resolve({ server, port: (server.address() as { port: number }).port }))
  })
}

/** Runs `meterd ARGS` on `dataDir` to its end: exit code, signal, and stdout and stderr together. */
export async function meterdOn(dataDir: string, ...args: string[]) {
  const port = await freePort()
  const r = spawnSync(process.execPath, [BIN, ...args], {
    encoding: 'utf8',
    timeout: 60_000, // a guard against a hang: loading the daemon is 2 s of CPU, over 20 s on a loaded machine
    env: { ...process.env, METERD_DATA_DIR: dataDir, METERD_ENDPOINT: `127.0.0.1:${port}`, METERD_OTLP_GRPC_ENDPOINT: '127.0.0.1:0', METERD_OTLP_HTTP_ENDPOINT: '127.0.0.1:0', METERD_LOG_LEVEL: 'warn' },
  })
  return { code: r.status, signal: r.signal, out: r.stdout + r.stderr }
}

/** A config `validate` refuses: what is wrong, the override that makes it so, the path named, why. */
export type Refused = [what: string, override: Record<string, unknown>, path: string, message: RegExp]

/**
 * Each override, merged over the embedded default, is refused by `validate` (exit 78, naming the
 * path and saying why), and those at the indices of `alsoRun` by `run` too, before it listens.
 */
export async function expectRefused(
  t: { equal(a: unknown, b: unknown, m?: string): void; match(a: unknown, b: unknown, m?: string): void },
  dir: string,
  cases: Refused[],
  alsoRun: number[],
): Promise<void> {
  for (const [i, [what, override, path, message]] of cases.entries()) {
    const cfg = writeConfig(dir, override, `case-${i}.yaml`)
    const v = await meterd(['validate', '--config', DEFAULT_CONFIG_PATH, '--config', cfg])
    t.equal(v.code, 78, `validate: ${what} → exit 78`)
    t.match(v.stderr, `  ${path}: `, `validate names ${path}`)
    t.match(v.stderr, message, `validate says why: ${what}`)
    if (!alsoRun.includes(i)) continue // run goes through the same checks; a sample of kinds keeps the test short
    const r = await meterd(['run', '--config', DEFAULT_CONFIG_PATH, '--config', cfg], { env: { METERD_DATA_DIR: join(dir, `data-${i}`) } })
    t.equal(r.code, 78, `run: ${what} → exit 78 before listening`)
    t.match(r.stderr, `  ${path}: `, `run names ${path} too`)
  }
}
