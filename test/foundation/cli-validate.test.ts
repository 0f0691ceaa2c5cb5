// validate finds what run would refuse: the graph, listeners, files and data directory (the
// limits on declared prices and addresses are in cli-validate-limits.test.ts: one file ran near
// tap's 120 s on a loaded machine, each case a process that loads every component).
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { expectRefused, listening, type Refused } from '../helpers/cli.js'
import { removeDir, tempDir } from '../helpers/meterd.js'

t.test('validate runs the checks run makes before it listens; run refuses the same configs', async (t) => {
  const dir = tempDir('meterd-validate-')
  t.teardown(() => removeDir(dir))
  const { port } = await listening().then(({ server, port }) => (server.close(), { port }))
  const file = join(dir, 'not-a-dir')
  writeFileSync(file, 'x')
  const cases: Refused[] = [
    ['a component needs an extension that is not started', { service: { extensions: ['apikeys', 'tools'] } }, 'exporters.webhook.export_configurations', /needs the exportconfigs extension/],
    ['a port that does not exist', { receivers: { otlp: { grpc: { endpoint: '127.0.0.1:99999' } } } }, 'receivers.otlp.grpc.endpoint', /invalid endpoint/],
    ['a host that is no host', { server: { endpoint: 'local host:8080' } }, 'server.endpoint', /neither an IP address nor a host name/],
    ['two listeners on one port', { server: { endpoint: `127.0.0.1:${port}` }, receivers: { otlp: { http: { endpoint: `0.0.0.0:${port}` } } } }, 'receivers.otlp.http.endpoint', /already taken by server\.endpoint/],
    ['a price book that is not there', { processors: { pricing: { price_book: join(dir, 'nope.yaml') } } }, 'processors.pricing.price_book', /cannot load the price book/],
    ['a data directory that is a file', { storage: { path: file } }, 'storage.path', /is a file, not a directory/],
  ]
  await expectRefused(t, dir, cases, [0, 1, 4])
})
