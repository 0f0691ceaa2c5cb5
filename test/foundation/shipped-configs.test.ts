/**
 * The config files shipped under config/ are used as written (docker-compose.yml, the docs):
 * each overlay must validate merged over the embedded default, in the order the compose file uses.
 */
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { PACKAGE_ROOT } from '../../src/core/paths.js'

const BIN = join(PACKAGE_ROOT, 'bin', 'meterd.js')
const cfg = (name: string) => join(PACKAGE_ROOT, 'config', name)

function validate(files: string[]) {
  return spawnSync(process.execPath, [BIN, 'validate', ...files.flatMap((f) => ['--config', f])], { encoding: 'utf8', timeout: 30_000 })
}

t.test('the gateway overlays validate over the default, as docker-compose.yml stacks them', async (t) => {
  const compose = readFileSync(join(PACKAGE_ROOT, 'docker-compose.yml'), 'utf8')
  const command = /command: \[([^\]]*)\]/.exec(compose)
  t.ok(command, 'the compose file names a command')
  const files = [...command![1].matchAll(/"\/app\/config\/([^"]+)"/g)].map((m) => m[1])
  t.same(files, ['meterd.yaml', 'gateway.yaml', 'gateway-clickhouse.yaml'])
  const run = validate(files.map(cfg))
  t.equal(run.status, 0, run.stderr)
  t.match(run.stdout, /valid/)
})
