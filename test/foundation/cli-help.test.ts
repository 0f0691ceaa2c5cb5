// CLI conventions: every command answers --help without running it; --version.
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { COMMANDS } from '../../src/cli/main.js'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { meterd } from '../helpers/cli.js'
import { removeDir, tempDir } from '../helpers/meterd.js'

t.test('every command answers --help with its usage, without running', async (t) => {
  const cwd = tempDir('meterd-cli-')
  t.teardown(() => removeDir(cwd))
  t.ok(COMMANDS.length >= 10, 'the command table lists the commands')
  for (const c of COMMANDS) {
    const r = await meterd([...c.name.split(' '), '--help'], { cwd })
    t.equal(r.code, 0, `${c.name} --help exits 0 (a running command would have been killed)`)
    t.match(r.stdout, new RegExp(`^usage: meterd ${c.name}\\b`), `${c.name} --help prints its usage`)
    for (const option of Object.keys(c.options)) t.match(r.stdout, `--${option}`, `${c.name} --help lists --${option}`)
  }
  t.notOk(existsSync(join(cwd, 'data')), 'no command ran: no data directory was created')
  const top = await meterd(['--help'])
  t.equal(top.code, 0)
  for (const c of COMMANDS) t.match(top.stdout, `  ${c.name} `, `meterd --help lists ${c.name}`)
  const pkg = JSON.parse(readFileSync(join(PACKAGE_ROOT, 'package.json'), 'utf8'))
  const v = await meterd(['--version'])
  t.equal(v.code, 0)
  t.match(v.stdout, `meterd ${pkg.version}`, '--version prints the package version')
})
