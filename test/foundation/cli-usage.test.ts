// CLI conventions: a wrong flag is answered with the command's usage and exit 64.
import t from 'tap'
import { COMMANDS } from '../../src/cli/main.js'
import { meterd } from '../helpers/cli.js'
import { removeDir, tempDir } from '../helpers/meterd.js'

t.test('an unknown or malformed flag is answered with the command usage and exit 64, never the parser text', async (t) => {
  const cwd = tempDir('meterd-cli-')
  t.teardown(() => removeDir(cwd))
  for (const c of COMMANDS) {
    const r = await meterd([...c.name.split(' '), '--no-such-flag'], { cwd })
    t.equal(r.code, 64, `${c.name} --no-such-flag exits 64`)
    t.match(r.stderr, `unknown option --no-such-flag`, `${c.name} names the flag`)
    t.match(r.stderr, `usage: meterd ${c.name}`, `${c.name} shows its usage`)
    t.notMatch(r.stderr, /To specify a positional argument|ERR_PARSE_ARGS/, `${c.name}: not Node's parser text`)
  }
  const missing = await meterd(['keys', 'create', '--team'], { cwd })
  t.equal(missing.code, 64)
  t.match(missing.stderr, 'keys create: --team needs a value')
  const short = await meterd(['validate', '-c'], { cwd })
  t.equal(short.code, 64)
  t.match(short.stderr, 'meterd: validate: --config needs a value', 'a flag with a short form is named once, not as "-c,"')
  const extra = await meterd(['keys', 'list', 'surplus'], { cwd })
  t.equal(extra.code, 64)
  t.match(extra.stderr, 'unexpected argument "surplus"')
  const sub = await meterd(['keys', 'frob'], { cwd })
  t.equal(sub.code, 64)
  t.match(sub.stderr, 'unknown subcommand "frob"')
})
