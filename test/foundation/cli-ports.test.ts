// A port in use at start-up is one line naming the setting and the fix, and exit 78.
import { join } from 'node:path'
import t from 'tap'
import { listening, meterd } from '../helpers/cli.js'
import { removeDir, tempDir } from '../helpers/meterd.js'

t.test('start-up failures, ports in use: one human line naming the cause and the fix, exit 78', async (t) => {
  const dir = tempDir('meterd-start-')
  t.teardown(() => removeDir(dir))
  const busy = await listening()
  t.teardown(() => busy.server.close())
  const inUse = (setting: string) =>
    new RegExp(`^meterd: cannot listen on 127\\.0\\.0\\.1:${busy.port} \\(${setting.replace(/\./g, '\\.')}\\): the address is already in use.* — stop that process or set ${setting.replace(/\./g, '\\.')} to a free port$`)
  const cases: [string, Record<string, string>, RegExp][] = [
    ['the base URL port is in use', { METERD_ENDPOINT: `127.0.0.1:${busy.port}` }, inUse('server.endpoint')],
    ['the OTLP/gRPC port is in use', { METERD_OTLP_GRPC_ENDPOINT: `127.0.0.1:${busy.port}` }, inUse('receivers.otlp.grpc.endpoint')],
    ['the OTLP/HTTP port is in use', { METERD_OTLP_HTTP_ENDPOINT: `127.0.0.1:${busy.port}` }, inUse('receivers.otlp.http.endpoint')],
  ]
  for (const [i, [what, env, re]] of cases.entries()) {
    const r = await meterd(['run'], { env: { METERD_DATA_DIR: join(dir, `data-${i}`), ...env } })
    t.equal(r.code, 78, `${what}: exit 78`)
    const lines = r.stderr.trim().split('\n')
    t.match(lines[lines.length - 1], re, `${what}: the last line names the cause and the fix`)
    t.notMatch(r.stderr, /"stack"|\n\s+at |No address added/, `${what}: no stack trace, no gRPC noise`)
    t.equal(lines.filter((l) => l.startsWith('meterd: ')).length, 1, `${what}: one human line`)
  }
})

t.test('a METERD_BOOTSTRAP_API_KEY shorter than bootstrap_key allows is refused at start, and no key is made', async (t) => {
  const dir = tempDir('meterd-start-')
  t.teardown(() => removeDir(dir))
  const dataDir = join(dir, 'data')
  const r = await meterd(['run'], { env: { METERD_DATA_DIR: dataDir, METERD_BOOTSTRAP_API_KEY: 'short' } })
  t.equal(r.code, 78)
  const lines = r.stderr.trim().split('\n')
  t.match(lines[lines.length - 1], /^meterd: METERD_BOOTSTRAP_API_KEY is 5 characters long: the first admin key must have at least 20 — set a longer random value/)
  t.notMatch(r.stderr + r.stdout, /hak_default_/, 'no key was generated in its place')
  const keys = await meterd(['keys', 'list', '--json'], { env: { METERD_DATA_DIR: dataDir } })
  t.equal(keys.code, 0)
  t.same(JSON.parse(keys.stdout), [], 'the store holds no key')
})
