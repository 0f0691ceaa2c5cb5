// Start-up failures are one line naming the cause and the fix, and exit 78.
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { meterd } from '../helpers/cli.js'
import { removeDir, tempDir } from '../helpers/meterd.js'

t.test('start-up failures, endpoints and data directories: one human line naming the cause and the fix, exit 78', async (t) => {
  const dir = tempDir('meterd-start-')
  t.teardown(() => removeDir(dir))
  const file = join(dir, 'a-file')
  writeFileSync(file, 'x')
  const cases: [string, Record<string, string>, RegExp][] = [
    [
      'an endpoint whose host does not resolve',
      { METERD_ENDPOINT: 'no-such-host.invalid:8080' },
      /^meterd: cannot listen on no-such-host\.invalid:8080 \(server\.endpoint\): the host part does not resolve.* — write server\.endpoint as host:port/,
    ],
    [
      'an address this host does not have',
      { METERD_ENDPOINT: '192.0.2.1:8080' },
      /^meterd: cannot listen on 192\.0\.2\.1:8080 \(server\.endpoint\): no network interface of this host has that address — /,
    ],
    [
      'a data directory that cannot be made',
      { METERD_DATA_DIR: join(file, 'data') },
      /^meterd: cannot open the data directory .*a-file\/data \(storage\.path\): it \(or a parent\) is a file, not a directory — point storage\.path/,
    ],
  ]
  for (const [i, [what, env, re]] of cases.entries()) {
    const r = await meterd(['run'], { env: { METERD_DATA_DIR: join(dir, `data-${i}`), ...env } })
    t.equal(r.code, 78, `${what}: exit 78`)
    const lines = r.stderr.trim().split('\n')
    t.match(lines[lines.length - 1], re, `${what}: the last line names the cause and the fix`)
    t.notMatch(r.stderr, /"stack"|\n\s+at /, `${what}: no stack trace`)
    t.equal(lines.filter((l) => l.startsWith('meterd: ')).length, 1, `${what}: one human line`)
  }
})
