import { execFile } from 'node:child_process'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { FACTORIES } from '../../src/components.js'
import { DEFAULT_CONFIG_PATH, loadConfigFiles } from '../../src/core/config/load.js'
import { resolveConfig } from '../../src/host/resolve.js'
import { factoryMap } from '../../src/host/graph.js'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { tempDir, writeConfig } from '../helpers/meterd.js'

const run = promisify(execFile)
const BIN = join(PACKAGE_ROOT, 'bin', 'meterd.js')

async function meterd(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [BIN, ...args], { env: { ...process.env, ...env } })
    return { code: 0, stdout, stderr }
  } catch (err: any) {
    return { code: err.code, stdout: err.stdout, stderr: err.stderr }
  }
}

t.test('validate: a bad config exits 78 and names the path of every error', async (t) => {
  const dir = tempDir()
  t.teardown(() => import('node:fs').then((fs) => fs.rmSync(dir, { recursive: true, force: true })))
  const graph = {
    receivers: { metering: { max_batch_items: 0 }, nosuch: {} },
    processors: { validate: { strict_attribution: 'yes' } },
    exporters: { lmdb: {} },
    connectors: { forward: {}, 'forward/back': {} },
    service: {
      extensions: ['apikeys', 'missing_ext'],
      pipelines: {
        usage: { receivers: ['metering', 'forward/back'], processors: ['validate', 'unknown_proc'], exporters: ['lmdb', 'forward'] },
        'usage/loop': { receivers: ['forward'], exporters: ['forward/back'] },
        traces: { receivers: ['metering'], exporters: ['lmdb'] },
        bogus: { receivers: ['metering'], exporters: ['lmdb'] },
      },
    },
  }
  const bad = writeConfig(dir, { server: { endpoint: 42, colour: 'blue' }, ...graph })
  // Schema errors are reported first (the graph cannot be checked on a malformed file)…
  const first = await meterd(['validate', '--config', bad])
  t.equal(first.code, 78, 'exit 78 (EX_CONFIG)')
  for (const path of ['server.endpoint', 'server.colour']) t.match(first.stderr, `${path}:`, `names ${path}`)

  // …then, once the top level is well-formed, every component and graph error at once.
  const graphBad = writeConfig(dir, graph, 'graph.yaml')
  const res = await meterd(['validate', '--config', DEFAULT_CONFIG_PATH, '--config', graphBad])
  t.equal(res.code, 78)
  for (const path of [
    'receivers.metering.max_batch_items',
    'receivers.nosuch',
    'processors.validate.strict_attribution',
    'service.extensions[1]',
    'service.pipelines.usage.processors[1]',
    'service.pipelines.traces.receivers[0]',
    'service.pipelines.traces.exporters[0]',
    'service.pipelines.bogus',
  ])
    t.match(res.stderr, `  ${path}:`, `names ${path}`)
  t.match(res.stderr, /cycle through connectors: usage(\/loop)? → .* → usage/, 'the connector cycle is found')
  t.match(res.stderr, /not valid \(\d+ errors\)/)
})

t.test('validate accepts the embedded default; print-config and components work', async (t) => {
  const ok = await meterd(['validate'])
  t.equal(ok.code, 0)
  t.match(ok.stdout, 'valid')
  const printed = await meterd(['print-config'], { METERD_ENDPOINT: '127.0.0.1:9999' })
  t.equal(printed.code, 0)
  t.match(printed.stdout, 'endpoint: 127.0.0.1:9999', 'env expansion is applied')
  t.match(printed.stdout, 'max_body_bytes: 1048576', 'defaults are filled in')
  const comps = await meterd(['components'])
  for (const f of FACTORIES) t.match(comps.stdout, new RegExp(`\\b${f.type}\\b`), `lists ${f.kind} ${f.type}`)
  const unknown = await meterd(['frobnicate'])
  t.equal(unknown.code, 64, 'unknown command: usage error')
})

t.test('env expansion, defaults and deep merge of several files', async (t) => {
  const dir = tempDir()
  const a = writeConfig(dir, { server: { endpoint: '${env:EP}', api_prefix: 'a' }, storage: { path: 'x' } }, 'a.yaml')
  const b = writeConfig(dir, { server: { max_body_bytes: '${env:MAX:-2048}', api_prefix: 'b-${env:SUFFIX:-z}' } }, 'b.yaml')
  const merged = loadConfigFiles([a, b], { EP: '127.0.0.1:1' }) as any
  t.same(merged.server, { endpoint: '127.0.0.1:1', api_prefix: 'b-z', max_body_bytes: 2048 }, 'merged; a whole-value reference is typed')
  t.equal(merged.storage.path, 'x')
  t.throws(() => loadConfigFiles([a], {}), /server\.endpoint: environment variable EP is not set/)
  const empty = writeConfig(dir, { storage: { path: '${env:NOPE:-}' } }, 'empty.yaml')
  t.equal((loadConfigFiles([empty], {}) as any).storage.path, '', 'an empty default is an empty string, not null')
  // `:-` takes the default for an empty variable too; `-` only for an unset one, as in the shell.
  const dash = writeConfig(dir, { server: { endpoint: '${env:EP:-127.0.0.1:1}', api_prefix: 'p${env:P-x}q' }, storage: { path: '${env:DIR-./data}' } }, 'dash.yaml')
  const set = loadConfigFiles([dash], { EP: '', P: '', DIR: '' }) as any
  t.same([set.server.endpoint, set.server.api_prefix, set.storage.path], ['127.0.0.1:1', 'pq', ''], 'an empty variable: the default with :-, empty with -')
  const unset = loadConfigFiles([dash], {}) as any
  t.same([unset.server.endpoint, unset.server.api_prefix, unset.storage.path], ['127.0.0.1:1', 'pxq', './data'], 'an unset variable: the default either way')
  t.same((loadConfigFiles([dash], { DIR: '/d' }) as any).storage.path, '/d')
  // The embedded config: an empty METERD_OTLP_*_ENDPOINT turns that listener off (docs/otlp.md).
  const otlp = (env: NodeJS.ProcessEnv) => (loadConfigFiles([DEFAULT_CONFIG_PATH], env) as any).receivers.otlp
  t.same(otlp({ METERD_OTLP_GRPC_ENDPOINT: '', METERD_OTLP_HTTP_ENDPOINT: '' }), { grpc: { endpoint: '' }, http: { endpoint: '' } })
  t.same(otlp({}), { grpc: { endpoint: '127.0.0.1:4317' }, http: { endpoint: '127.0.0.1:4318' } })
  const broken = writeConfig(dir, {}, 'broken.yaml')
  await import('node:fs').then((fs) => fs.writeFileSync(broken, 'server: [unclosed'))
  t.throws(() => loadConfigFiles([broken], {}), /broken\.yaml/)
})

t.test('the graph: fan-out to several exporters, forward connector, and bad references', async (t) => {
  const factories = factoryMap(FACTORIES)
  const dir = tempDir()
  const good = writeConfig(dir, {
    exporters: { lmdb: {}, 'debug/a': {}, 'debug/b': { verbosity: 'detailed' } },
    connectors: { forward: {} },
    service: {
      pipelines: {
        usage: { receivers: ['metering', 'genai'], processors: ['validate', 'attribution'], exporters: ['lmdb', 'debug/a', 'forward'] },
        'usage/copy': { receivers: ['forward'], exporters: ['debug/b'] },
      },
    },
  })
  const r = resolveConfig([DEFAULT_CONFIG_PATH, good], factories, {})
  t.same(r.issues, [])
  const unused = writeConfig(dir, { connectors: { forward: {} }, service: { pipelines: { usage: { receivers: ['metering', 'genai'], exporters: ['forward'] } } } }, 'unused.yaml')
  const u = resolveConfig([DEFAULT_CONFIG_PATH, unused], factories, {})
  t.match(u.issues, [{ path: 'connectors.forward', message: /used as an exporter in one pipeline and as a receiver/ }])
})

t.test('a config YAML cannot resolve (alias bomb, unknown or self alias) or that never ends (/dev/zero) exits 78 naming the file', async (t) => {
  const dir = tempDir()
  t.teardown(() => import('node:fs').then((fs) => fs.rmSync(dir, { recursive: true, force: true })))
  const { writeFileSync } = await import('node:fs')
  const lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
  for (const [prev, name] of [['a', 'b'], ['b', 'c'], ['c', 'd'], ['d', 'e'], ['e', 'f'], ['f', 'g']]) lines.push(`${name}: &${name} [${Array(9).fill(`*${prev}`).join(',')}]`)
  const files = { 'bomb.yaml': lines.join('\n') + '\n', 'unknown.yaml': '<<: *nope\n', 'self.yaml': 'a: &x [*x]\n' }
  for (const [name, text] of Object.entries(files)) {
    const path = join(dir, name)
    writeFileSync(path, text)
    const res = await meterd(['validate', '--config', path])
    t.equal(res.code, 78, `${name}: exit 78, not 1`)
    t.match(res.stderr, `  ${path}: cannot be read as YAML`, `${name}: the file is named`)
  }
  const zero = await meterd(['validate', '--config', '/dev/zero'])
  t.equal(zero.code, 78, '/dev/zero is refused, not read until memory runs out')
  t.match(zero.stderr, '/dev/zero: cannot read: larger than 16 MiB')
})

t.test('a storage.max_size_mb past what LMDB can map is refused by validate, run and keys (exit 78), instead of a SIGSEGV at start', async (t) => {
  const dir = tempDir()
  t.teardown(() => import('node:fs').then((fs) => fs.rmSync(dir, { recursive: true, force: true })))
  const huge = writeConfig(dir, { storage: { path: join(dir, 'data'), max_size_mb: 99_999_999_999 } })
  for (const args of [['validate'], ['keys', 'create', '--init', '--team', 't', '--scopes', 'admin'], ['run']]) {
    const r = await meterd([...args, '--config', DEFAULT_CONFIG_PATH, '--config', huge], { METERD_ENDPOINT: '127.0.0.1:0', METERD_OTLP_GRPC_ENDPOINT: '', METERD_OTLP_HTTP_ENDPOINT: '' })
    t.equal(r.code, 78, `meterd ${args[0]}: exit 78`)
    t.match(r.stderr, '  storage.max_size_mb: ', 'names the setting')
  }
})
