// A real redis-server on 127.0.0.1 for the rate-limit tests and benchmark (plain JS, so both
// the TypeScript tests and the JS benches import it). .ci/run installs redis-server.
import { spawnSync } from 'node:child_process'
import { connect } from 'node:net'
import { freePort } from './net.js'
import { spawnBound } from './orphans.js'

export const haveRedis = spawnSync('redis-server', ['--version']).error === undefined

/**
 * Starts redis-server (no persistence) on `port` or a free one and resolves once it answers PING.
 * @returns {Promise<{ url: string, port: number, stop(): Promise<void> }>}
 */
export async function startRedis(port) {
  port ??= await freePort()
  const proc = spawnBound('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
  const exited = new Promise((resolve) => proc.once('exit', () => resolve()))
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL')
    await exited
  }
  const { Redis } = await import('ioredis')
  const probe = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
  probe.on('error', () => {})
  const until = Date.now() + 10_000
  for (;;) {
    try {
      await probe.connect()
      await probe.ping()
      break
    } catch {
      if (Date.now() > until) {
        await stop()
        throw new Error('redis-server did not start')
      }
      await new Promise((r) => setTimeout(r, 50))
    }
  }
  probe.disconnect()
  return { url: `redis://127.0.0.1:${port}`, port, stop }
}

/**
 * Holds redis-server busy for `seconds` (a Lua loop on its own connection), as a slow Redis is:
 * commands sent meanwhile wait, then run. Resolves when it lets go.
 *
 * The EVAL goes out on a socket of this process, not through a spawned redis-cli: a spawn took
 * more than the 150 ms callers leave before their next command on a loaded machine (load 11),
 * so that command ran before the stall and the test saw no stall at all.
 * @returns {Promise<void>}
 */
export function stallRedis(port, seconds) {
  const lua = `local t = redis.call('TIME') local s = t[1] + t[2] / 1e6 repeat local n = redis.call('TIME') until n[1] + n[2] / 1e6 - s > ${seconds} return 1`
  const args = ['EVAL', lua, '0']
  const command = `*${args.length}\r\n` + args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(command))
    // The script's reply (or the connection closing: a Redis stopped meanwhile) ends the stall.
    socket.once('data', () => socket.destroy())
    socket.once('close', () => resolve())
    socket.once('error', reject)
  })
}
