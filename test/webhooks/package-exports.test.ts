// The package as a library: `meterd/verify` and `meterd` load the verifier and nothing of the daemon.
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { removeDir, tempDir } from '../helpers/meterd.js'

/**
 * Imports `specifier` in a project that depends on meterd (through the package's `exports`) and
 * returns what it exported and every module URL that was resolved on the way.
 */
function importAsConsumer(t: { teardown(fn: () => void): void; equal(a: unknown, b: unknown, m?: string): void }, specifier: string): { exported: string[]; modules: string[] } {
  const dir = tempDir('meterd-consumer-')
  t.teardown(() => removeDir(dir))
  mkdirSync(join(dir, 'node_modules'))
  symlinkSync(PACKAGE_ROOT, join(dir, 'node_modules', 'meterd'))
  const log = join(dir, 'resolved.log')
  writeFileSync(
    join(dir, 'hooks.mjs'),
    `import { appendFileSync } from 'node:fs'
export async function resolve(specifier, context, next) {
  const r = await next(specifier, context)
  appendFileSync(${JSON.stringify(log)}, r.url + '\\n')
  return r
}
`,
  )
  writeFileSync(join(dir, 'register.mjs'), `import { register } from 'node:module'\nregister('./hooks.mjs', import.meta.url)\n`)
  writeFileSync(join(dir, 'main.mjs'), `const m = await import(${JSON.stringify(specifier)})\nconsole.log(JSON.stringify(Object.keys(m)))\n`)
  const r = spawnSync(process.execPath, ['--import', './register.mjs', 'main.mjs'], { cwd: dir, encoding: 'utf8', timeout: 60_000 })
  t.equal(r.status, 0, `import '${specifier}' works: ${r.stderr}`)
  const modules = existsSync(log) ? readFileSync(log, 'utf8').split('\n').filter(Boolean) : []
  return { exported: r.status === 0 ? JSON.parse(r.stdout) : [], modules }
}

const DAEMON_PARTS = /node_modules\/(lmdb|@grpc|pino|prom-client|ioredis|undici|protobufjs|yaml|@sinclair)\/|\/dist\/src\/(core|store|transport|receivers|exporters|extensions|processors|connectors)\//

for (const specifier of ['meterd/verify', 'meterd']) {
  t.test(`import '${specifier}' loads the verifier and nothing of the daemon`, async (t) => {
    const { exported, modules } = importAsConsumer(t, specifier)
    for (const name of ['verifyWebhook', 'WebhookDeduplicator', 'signatureHeader']) t.ok(exported.includes(name), `exports ${name}`)
    t.ok(modules.some((m) => m.endsWith('/domain/webhooks/verify.js')), 'the verifier was loaded (the hook sees the imports)')
    t.same(modules.filter((m) => DAEMON_PARTS.test(m)), [], 'no LMDB, gRPC, logger, store or component module was loaded')
  })
}

t.test("import 'meterd/daemon' is where the daemon is", async (t) => {
  const { exported, modules } = importAsConsumer(t, 'meterd/daemon')
  for (const name of ['Service', 'resolveConfig', 'FACTORIES', 'factoryMap']) t.ok(exported.includes(name), `exports ${name}`)
  t.ok(modules.some((m) => /node_modules\/lmdb\//.test(m)), 'and it loads LMDB (so the check above can see it)')
})
