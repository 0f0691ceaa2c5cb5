// keys commands against a data directory the daemon may not be using.
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { meterd } from '../helpers/cli.js'
import { removeDir, tempDir } from '../helpers/meterd.js'

t.test('keys commands refuse a data directory that holds no store, instead of making a new one', async (t) => {
  const cwd = tempDir('meterd-cli-')
  t.teardown(() => removeDir(cwd))
  const env = { METERD_DATA_DIR: '' } // the default ./data, as a new user has it
  for (const args of [['keys', 'list'], ['keys', 'create', '--team', 't', '--scopes', 'admin'], ['keys', 'revoke', 'key_x']]) {
    const r = await meterd(args, { cwd, env })
    t.equal(r.code, 78, `${args.join(' ')} exits 78`)
    t.match(r.stderr, /no data directory at \.\/data .*is the daemon using another storage\.path\?.*METERD_DATA_DIR/, `${args[1]}: says why and what to do`)
    t.notOk(existsSync(join(cwd, 'data')), `${args[1]}: nothing was created`)
  }
  const init = await meterd(['keys', 'create', '--team', 't', '--scopes', 'admin', '--init'], { cwd, env })
  t.equal(init.code, 0, '--init creates the store on purpose')
  t.ok(existsSync(join(cwd, 'data', 'data.mdb')))
  const list = await meterd(['keys', 'list', '--json'], { cwd, env })
  t.equal(list.code, 0)
  t.equal(JSON.parse(list.stdout).length, 1, 'and then keys list reads it')
})
