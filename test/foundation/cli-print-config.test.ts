// print-config shows what will run; config errors say what is expected.
import { readFileSync } from 'node:fs'
import t from 'tap'
import { parse } from 'yaml'
import { FACTORIES } from '../../src/components.js'
import { DEFAULT_CONFIG_PATH } from '../../src/core/config/load.js'
import { meterd } from '../helpers/cli.js'
import { removeDir, tempDir, writeConfig } from '../helpers/meterd.js'

t.test('print-config shows every default of every component the config holds', async (t) => {
  const r = await meterd(['print-config'])
  t.equal(r.code, 0)
  const printed = parse(r.stdout)
  const config = parse(readFileSync(DEFAULT_CONFIG_PATH, 'utf8'))
  let checked = 0
  for (const f of FACTORIES) {
    const section = `${f.kind}s`
    if (!config[section] || !(f.type in config[section])) continue
    const keys = Object.keys((f.schema as { properties?: object }).properties ?? {})
    const required = new Set((f.schema as { required?: string[] }).required ?? [])
    for (const key of keys) {
    const hasDefault = (f.schema as any).properties[key].default !== undefined || (f.schema as any).properties[key].type === 'object'
    if (!hasDefault && !required.has(key)) continue
    t.ok(key in (printed[section][f.type] ?? {}), `${section}.${f.type}.${key} is printed`)
    checked++
    }
  }
  t.ok(checked > 30, `checked the defaults of the default config's components (${checked})`)
  t.equal(printed.receivers.otlp.grpc.max_message_bytes, 4 * 1024 * 1024, 'a nested default is filled in')
})

t.test('enum errors list the allowed values', async (t) => {
  const dir = tempDir('meterd-validate-')
  t.teardown(() => removeDir(dir))
  const cfg = writeConfig(dir, { extensions: { ratelimit: { backend: 'redsi' } }, processors: { pricing: { tools: { billing_period: 'fortnight' } } } })
  const r = await meterd(['validate', '--config', DEFAULT_CONFIG_PATH, '--config', cfg])
  t.equal(r.code, 78)
  t.match(r.stderr, 'extensions.ratelimit.backend: expected memory or redis (got "redsi")')
  t.match(r.stderr, 'processors.pricing.tools.billing_period: expected month, week, day or year (got "fortnight")')
  t.notMatch(r.stderr, 'union value')
})

t.test('print-config shows that secrets are set, never their values', async (t) => {
  const dir = tempDir('meterd-print-secrets-')
  t.teardown(() => removeDir(dir))
  const cfg = writeConfig(dir, {
    extensions: { apikeys: { bootstrap_key: 'hak_print_secretsecretsecretsecret01' }, ratelimit: { backend: 'redis', redis: { url: 'redis://meterd:redispass123@127.0.0.1:6379' } } },
  })
  const r = await meterd(['print-config', '--config', DEFAULT_CONFIG_PATH, '--config', cfg], { env: { METERD_MASTER_KEY: 'master-secret-value-42' } })
  t.equal(r.code, 0, r.stderr)
  for (const secret of ['master-secret-value-42', 'hak_print_secretsecretsecretsecret01', 'redispass123']) t.notMatch(r.stdout, secret, `${secret.slice(0, 6)}… is not printed`)
  const printed = parse(r.stdout)
  t.equal(printed.extensions.exportconfigs.master_key, '<redacted>')
  t.equal(printed.extensions.apikeys.bootstrap_key, '<redacted>')
  t.equal(printed.extensions.ratelimit.redis.url, 'redis://meterd:<redacted>@127.0.0.1:6379', 'the URL stays readable')
})
