// validate finds what run would refuse, and a config with no pipeline is an error.
import { existsSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { DEFAULT_CONFIG_PATH } from '../../src/core/config/load.js'
import { listening, meterd } from '../helpers/cli.js'
import { removeDir, tempDir, writeConfig } from '../helpers/meterd.js'

t.test('validate runs the checks run makes before it listens; run refuses the same configs', async (t) => {
  const dir = tempDir('meterd-validate-')
  t.teardown(() => removeDir(dir))
  const { port } = await listening().then(({ server, port }) => (server.close(), { port }))
  const file = join(dir, 'not-a-dir')
  writeFileSync(file, 'x')
  const cases: [string, Record<string, unknown>, string, RegExp][] = [
    ['a component needs an extension that is not started', { service: { extensions: ['apikeys', 'tools'] } }, 'exporters.webhook.export_configurations', /needs the exportconfigs extension/],
    ['a port that does not exist', { receivers: { otlp: { grpc: { endpoint: '127.0.0.1:99999' } } } }, 'receivers.otlp.grpc.endpoint', /invalid endpoint/],
    ['a host that is no host', { server: { endpoint: 'local host:8080' } }, 'server.endpoint', /neither an IP address nor a host name/],
    ['two listeners on one port', { server: { endpoint: `127.0.0.1:${port}` }, receivers: { otlp: { http: { endpoint: `0.0.0.0:${port}` } } } }, 'receivers.otlp.http.endpoint', /already taken by server\.endpoint/],
    ['a price book that is not there', { processors: { pricing: { price_book: join(dir, 'nope.yaml') } } }, 'processors.pricing.price_book', /cannot load the price book/],
    ['a declared tool the API would refuse', { extensions: { tools: { tools: [{ toolId: 'search', name: 'Search', toolType: 'NOPE' }] } } }, 'extensions.tools.tools[0].toolType', /must be one of SDK/],
    ['a declared tool price past 10^9', { extensions: { tools: { tools: [{ toolId: 's', name: 'S', toolType: 'SDK', pricing: { elements: [{ name: 'calls', aggregationType: 'COUNT', unitPrice: '1000000001' }] } }] } } }, 'extensions.tools.tools[0].pricing.elements[0].unitPrice', /must be at most 1000000000/],
    ['a model override price past 10^9', { processors: { pricing: { models: [{ provider: 'openai', model: 'm', effective: '2026-01-01', input: 1, output: 2, long_context: { threshold: 10, output: 1e12 } }] } } }, 'processors.pricing.models[0].long_context.output', /must be at most 1000000000 \(USD\) per million tokens/],
    ['an allow-list entry that is no address', { extensions: { exportconfigs: { allow_private_destinations: ['intranet'] } } }, 'extensions.exportconfigs.allow_private_destinations', /not an address or CIDR/],
    ['a redis URL that is not one', { extensions: { ratelimit: { backend: 'redis', redis: { url: 'http://cache:6379' } } } }, 'extensions.ratelimit.redis.url', /not a redis:\/\//],
    ['a data directory that is a file', { storage: { path: file } }, 'storage.path', /is a file, not a directory/],
  ]
  for (const [i, [what, override, path, message]] of cases.entries()) {
    const cfg = writeConfig(dir, override, `case-${i}.yaml`)
    const v = await meterd(['validate', '--config', DEFAULT_CONFIG_PATH, '--config', cfg])
    t.equal(v.code, 78, `validate: ${what} → exit 78`)
    t.match(v.stderr, `  ${path}: `, `validate names ${path}`)
    t.match(v.stderr, message, `validate says why: ${what}`)
    if (![0, 1, 4, 6].includes(i)) continue // run goes through the same checks; a sample of kinds keeps the test short
    const r = await meterd(['run', '--config', DEFAULT_CONFIG_PATH, '--config', cfg], { env: { METERD_DATA_DIR: join(dir, `data-${i}`) } })
    t.equal(r.code, 78, `run: ${what} → exit 78 before listening`)
    t.match(r.stderr, `  ${path}: `, `run names ${path} too`)
  }
})

t.test('a config whose merge leaves no pipeline is an error in validate and run', async (t) => {
  const dir = tempDir('meterd-validate-')
  t.teardown(() => removeDir(dir))
  // The override given alone, without the default: a common first mistake.
  const alone = writeConfig(dir, { extensions: { ratelimit: { limits: { metering: 5 } } } })
  for (const cmd of ['validate', 'run']) {
    const r = await meterd([cmd, '--config', alone], { env: { METERD_DATA_DIR: join(dir, 'data') } })
    t.equal(r.code, 78, `${cmd} exits 78`)
    t.match(r.stderr, /service\.pipelines: no pipeline is configured.*give the default first/, `${cmd} says what to do`)
  }
  t.notOk(existsSync(join(dir, 'data')), 'run did not start: no data directory')
})
