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
  const flagAfter = await meterd(['webhook', 'listen', '--port', '--secret', 'whsec_x'], { cwd })
  t.equal(flagAfter.code, 64)
  t.match(flagAfter.stderr, 'webhook listen: --port needs a value', 'a flag where its value should be: it needs one, not "takes no value"')
  const extra = await meterd(['keys', 'list', 'surplus'], { cwd })
  t.equal(extra.code, 64)
  t.match(extra.stderr, 'unexpected argument "surplus"')
  const sub = await meterd(['keys', 'frob'], { cwd })
  t.equal(sub.code, 64)
  t.match(sub.stderr, 'unknown subcommand "frob"')
})

t.test('wrong values are bad usage (64) with the command usage; unreadable inputs and unusable listeners are one line with their own codes', async (t) => {
  const cwd = tempDir('meterd-cli-')
  t.teardown(() => removeDir(cwd))
  const from = await meterd(['reprice', '--from', 'yesterday'], { cwd })
  t.equal(from.code, 64)
  t.match(from.stderr, 'meterd: reprice: --from must be an ISO-8601 date-time\n\nusage: meterd reprice', "reprice's usage, not the list of every command")
  const account = await meterd(['keys', 'create', '--team', 't', '--scopes', 'admin', '--account', ''], { cwd })
  t.equal(account.code, 64, 'an empty --account is bad usage, not exit 1')
  t.match(account.stderr, /the account name must be 1 to 255 characters[^]*usage: meterd keys create/)
  const missing = await meterd(['webhook', 'verify', '--secret', 'whsec_x', '--headers', 'no-such-file', '--body', 'no-such-file'], { cwd })
  t.equal(missing.code, 66, 'a file that cannot be read is not "invalid" (1)')
  t.equal(missing.stderr, 'meterd: cannot read --headers no-such-file: ENOENT\n')
  const tolerance = await meterd(['webhook', 'verify', '--secret', 'whsec_x', '--headers', '/dev/null', '--body', '/dev/null', '--tolerance', 'abc'], { cwd })
  t.equal(tolerance.code, 64)
  t.match(tolerance.stderr, 'webhook verify: --tolerance must be a number of seconds')
  const { createServer } = await import('node:net')
  const busy = createServer()
  await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve))
  t.teardown(() => busy.close())
  const port = (busy.address() as { port: number }).port
  const inUse = await meterd(['webhook', 'listen', '--port', String(port), '--secret', 'whsec_x'], { cwd, timeout: 15_000 })
  t.equal(inUse.code, 78)
  t.match(inUse.stderr, `meterd: cannot listen on 127.0.0.1:${port} (--host/--port): the address is already in use`)
  t.notMatch(inUse.stderr, /\n\s+at /, 'no stack')
  const badHost = await meterd(['webhook', 'listen', '--port', '0', '--host', 'no such host', '--secret', 'whsec_x'], { cwd, timeout: 15_000 })
  t.equal(badHost.code, 78)
  t.match(badHost.stderr, 'write --host/--port as an address or a name that resolves (--host 127.0.0.1) and a port (--port 8080)', 'the fix names the flags as they are given, not as one host:port')
})

t.test('output nobody reads (| head, a full disk) ends a command without a stack: 141 as Unix tools for a closed pipe, one line and 74 for a write error', { skip: process.platform !== 'linux' && 'needs /dev/full' }, async (t) => {
  const { spawn } = await import('node:child_process')
  const { openSync, closeSync } = await import('node:fs')
  const { join } = await import('node:path')
  const { PACKAGE_ROOT } = await import('../../src/core/paths.js')
  const bin = join(PACKAGE_ROOT, 'bin', 'meterd.js')
  const runWith = (args: string[], stdout: 'pipe' | number, closeAtOnce: boolean) =>
    new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, [bin, ...args], { stdio: ['ignore', stdout, 'pipe'] })
      if (closeAtOnce) child.stdout!.destroy()
      let stderr = ''
      child.stderr!.on('data', (d) => (stderr += d))
      child.on('close', (code) => resolve({ code, stderr }))
    })
  const full = openSync('/dev/full', 'w')
  t.teardown(() => closeSync(full))
  for (const args of [['docs'], ['--help'], ['print-config']]) {
    const r = await runWith(args, full, false)
    t.equal(r.code, 74, `meterd ${args.join(' ')} > /dev/full exits 74`)
    t.equal(r.stderr, 'meterd: cannot write the output: ENOSPC\n', 'one line, no stack')
  }
  // The reading end is closed before meterd writes: its first write meets EPIPE.
  const closed = await runWith(['docs'], 'pipe', true)
  t.equal(closed.code, 141, 'a closed pipe: 141, as Unix tools')
  t.equal(closed.stderr, '', 'nothing on stderr')
})
