// validate finds declared values the APIs would refuse (tool types, prices past 10^9, addresses,
// URLs), and a config with no pipeline is an error in validate and run.
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { expectRefused, meterd, type Refused } from '../helpers/cli.js'
import { removeDir, tempDir, writeConfig } from '../helpers/meterd.js'

t.test('validate refuses the declared values the APIs would; run refuses them too', async (t) => {
  const dir = tempDir('meterd-validate-')
  t.teardown(() => removeDir(dir))
  const cases: Refused[] = [
    ['a declared tool the API would refuse', { extensions: { tools: { tools: [{ toolId: 'search', name: 'Search', toolType: 'NOPE' }] } } }, 'extensions.tools.tools[0].toolType', /must be one of SDK/],
    ['a declared tool price past 10^9', { extensions: { tools: { tools: [{ toolId: 's', name: 'S', toolType: 'SDK', pricing: { elements: [{ name: 'calls', aggregationType: 'COUNT', unitPrice: '1000000001' }] } }] } } }, 'extensions.tools.tools[0].pricing.elements[0].unitPrice', /must be at most 1000000000/],
    ['a model override price past 10^9', { processors: { pricing: { models: [{ provider: 'openai', model: 'm', effective: '2026-01-01', input: 1, output: 2, long_context: { threshold: 10, output: 1e12 } }] } } }, 'processors.pricing.models[0].long_context.output', /must be at most 1000000000 \(USD\) per million tokens/],
    ['an allow-list entry that is no address', { extensions: { exportconfigs: { allow_private_destinations: ['intranet'] } } }, 'extensions.exportconfigs.allow_private_destinations', /not an address or CIDR/],
    ['a redis URL that is not one', { extensions: { ratelimit: { backend: 'redis', redis: { url: 'http://cache:6379' } } } }, 'extensions.ratelimit.redis.url', /not a redis:\/\//],
  ]
  await expectRefused(t, dir, cases, [1])
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
