// The commands that only read a config (validate, print-config, docs) load each component's
// descriptor (schema, checks), not its implementation: no listener, protocol decoder, client or
// store, which cost them most of their second of CPU. Seen through a module-load hook.
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { DEFAULT_CONFIG_PATH } from '../../src/core/config/load.js'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { meterd } from '../helpers/cli.js'
import { removeDir, tempDir } from '../helpers/meterd.js'

/** What only a running component needs: the gRPC and HTTP servers, OTLP decoding, ClickHouse, LMDB, Redis, undici. */
const RUNTIME = [
  /node_modules\/@grpc\/grpc-js\//,
  /node_modules\/protobufjs\//,
  /node_modules\/@clickhouse\/client\//,
  /node_modules\/lmdb\//,
  /node_modules\/ioredis\//,
  /node_modules\/undici\//,
  /\/src\/transport\/(grpc|http|otlp)\//,
  /\/src\/(receivers|processors|exporters|connectors|extensions)\/[a-z]+\/index\.js$/,
]

t.test('validate, print-config and docs load no component implementation', async (t) => {
  const dir = tempDir('meterd-modules-')
  t.teardown(() => removeDir(dir))
  // Node calls the load hook (on its own thread) for every module imported, a CommonJS package's entry included.
  const hook = join(dir, 'hook.mjs')
  writeFileSync(
    hook,
    `import { register } from 'node:module'\n` +
      `register('data:text/javascript,' + encodeURIComponent(\`import { appendFileSync } from 'node:fs'\n` +
      `export async function load(url, ctx, next) { appendFileSync(process.env.LOADED_LOG, url + '\\\\n'); return next(url, ctx) }\`))\n`,
  )
  const config = (name: string) => join(PACKAGE_ROOT, 'config', name)
  const runs: [string, string[]][] = [
    ['validate (the embedded default)', ['validate']],
    ['validate (a gateway with a ClickHouse exporter)', ['validate', '--config', DEFAULT_CONFIG_PATH, '--config', config('gateway.yaml'), '--config', config('gateway-clickhouse.yaml')]],
    ['print-config', ['print-config']],
    ['docs', ['docs']],
  ]
  for (const [i, [what, args]] of runs.entries()) {
    const log = join(dir, `loaded-${i}.txt`)
    writeFileSync(log, '')
    const r = await meterd(args, { cwd: dir, env: { NODE_OPTIONS: `--import=${hook}`, LOADED_LOG: log } })
    t.equal(r.code, 0, `${what} exits 0`)
    const loaded = readFileSync(log, 'utf8').split('\n')
    t.ok(loaded.some((u) => u.endsWith('/src/components.js')), `${what}: the hook saw the component list load`)
    t.ok(loaded.some((u) => u.endsWith('/src/receivers/otlp/descriptor.js')), `${what}: it loaded the descriptors`)
    for (const re of RUNTIME) t.same(loaded.filter((u) => re.test(u)), [], `${what} loads nothing matching ${re}`)
  }
})
