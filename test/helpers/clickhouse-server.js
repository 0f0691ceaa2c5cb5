// A real clickhouse-server on 127.0.0.1 for the ClickHouse exporter's tests and benchmark (plain
// JS, so both the TypeScript tests and the JS benches import it). .ci/run installs Debian's
// clickhouse-server; it starts here from a small generated config in a temporary directory.
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freePort } from './net.js'
import { spawnBound } from './orphans.js'

const BINARY = ['/usr/bin/clickhouse-server', '/usr/sbin/clickhouse-server'].find((p) => existsSync(p)) ?? 'clickhouse-server'

export const haveClickHouse = spawnSync(BINARY, ['--help']).error === undefined

function configXml(dir, tcp, http) {
  return `<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>${dir}/server.log</log><errorlog>${dir}/server.err.log</errorlog><size>10M</size><count>1</count></logger>
  <listen_host>127.0.0.1</listen_host>
  <tcp_port>${tcp}</tcp_port>
  <http_port>${http}</http_port>
  <path>${dir}/data/</path>
  <tmp_path>${dir}/tmp/</tmp_path>
  <user_files_path>${dir}/user_files/</user_files_path>
  <format_schema_path>${dir}/format_schemas/</format_schema_path>
  <users_config>${dir}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>67108864</mark_cache_size>
  <max_concurrent_queries>100</max_concurrent_queries>
  <timezone>UTC</timezone>
</yandex>
`
}

const USERS_XML = `<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
  <users>
    <default>
      <password></password>
      <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </default>
  </users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
`

/**
 * Starts clickhouse-server in a fresh temporary directory (or `opts.dir`, to restart one on the
 * same data and ports) and resolves once its HTTP interface answers.
 * @param {{ dir?: string, tcpPort?: number, httpPort?: number }} [opts]
 * @returns {Promise<{ url: string, httpPort: number, tcpPort: number, dir: string, stop(): Promise<void>, remove(): void }>}
 */
export async function startClickHouse(opts = {}) {
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'meterd-clickhouse-'))
  const httpPort = opts.httpPort ?? (await freePort())
  const tcpPort = opts.tcpPort ?? (await freePort())
  writeFileSync(join(dir, 'config.xml'), configXml(dir, tcpPort, httpPort))
  writeFileSync(join(dir, 'users.xml'), USERS_XML)
  const proc = spawnBound(BINARY, ['--config-file', join(dir, 'config.xml')], { stdio: 'ignore', cwd: dir })
  const exited = new Promise((resolve) => proc.once('exit', () => resolve()))
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL')
    await exited
  }
  const url = `http://127.0.0.1:${httpPort}`
  const until = Date.now() + 30_000
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`clickhouse-server exited with ${proc.exitCode}; see ${dir}/server.err.log`)
    try {
      const res = await fetch(`${url}/?query=SELECT%201`)
      if (res.ok && (await res.text()).trim() === '1') break
    } catch {}
    if (Date.now() > until) {
      await stop()
      throw new Error(`clickhouse-server did not start; see ${dir}/server.err.log`)
    }
    await new Promise((r) => setTimeout(r, 100))
  }
  return { url, httpPort, tcpPort, dir, stop, remove: () => rmSync(dir, { recursive: true, force: true }) }
}
