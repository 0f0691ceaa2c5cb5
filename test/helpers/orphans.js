// Servers the tests and benches start must not outlive them (plain JS, for both). tap ends a file
// that runs past its timeout with SIGALRM: neither its teardowns nor 'exit' listeners run, and the
// meterd, redis-server and clickhouse-server it had started kept running, orphaned, loading the
// machine for the files after it. A parent-death signal (Linux, util-linux setpriv, which execs the
// command: the pid is the server's) ends them with the process that started them.
import { spawn, spawnSync } from 'node:child_process'

const PREFIX = spawnSync('setpriv', ['--help']).error === undefined ? ['setpriv', '--pdeathsig', 'KILL'] : []

/**
 * `spawn(command, args, options)`, the process killed (SIGKILL) when this one ends.
 * @param {string} command
 * @param {string[]} args
 * @param {import('node:child_process').SpawnOptions} options
 */
export function spawnBound(command, args, options) {
  const [cmd, ...rest] = [...PREFIX, command, ...args]
  return spawn(cmd, rest, options)
}
