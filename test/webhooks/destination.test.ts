/**
 * The SSRF guard of webhook destinations (issue 15 item 7): addresses that embed an internal
 * IPv4 address, port 0, and names that resolve to internal addresses are refused when a
 * configuration is created or changed, not only when a delivery connects.
 */
import { lookup } from 'node:dns/promises'
import { hostname } from 'node:os'
import t from 'tap'
import { call } from '../helpers/meterd.js'
import { DestinationGuard } from '../../src/domain/webhooks/destination.js'
import { api, startReceiver, startWebhookMeterd } from '../helpers/webhook-receiver.js'

/** The host part of a URL as meterd sees it (the URL parser rewrites `::127.0.0.1` to `::7f00:1`). */
const hostOf = (url: string) => new URL(url).hostname

t.test('addresses that embed an IPv4 address are judged by the address they embed', async (t) => {
  const guard = new DestinationGuard()
  const refused = [
    'http://[::127.0.0.1]/', 'http://[::ffff:127.0.0.1]/', 'http://[::ffff:10.1.2.3]/', 'http://[::a00:1]/',
    'http://[64:ff9b::7f00:1]/', 'http://[64:ff9b::127.0.0.1]/', 'http://[64:ff9b::a9fe:a9fe]/', 'http://[64:ff9b::c0a8:101]/',
    'http://[64:ff9b:1::8.8.8.8]/', // local-use NAT64 (RFC 8215): internal whatever it embeds
    'http://[2002:7f00:1::]/', 'http://[2002:a9fe:a9fe::1]/', 'http://[2002:ac10:1::]/',
    'http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/', // Teredo whose client is 127.0.0.1
    'http://[fec0::1]/', 'http://[::]/', 'http://[::1]/',
  ]
  for (const u of refused) t.ok(guard.refuses(hostOf(u)), `${u} is refused`)
  const allowed = [
    'http://8.8.8.8/', 'http://[::ffff:8.8.8.8]/', 'http://[64:ff9b::808:808]/', 'http://[2002:808:808::1]/',
    'http://[2606:4700:4700::1111]/', 'http://[2001:0:4136:e378:8000:63bf:f7f7:f7f7]/',
  ]
  for (const u of allowed) t.notOk(guard.refuses(hostOf(u)), `${u} (public) is allowed`)

  // The operator's allow list: 127.0.0.1 is that host in any notation, but not what a translator reaches.
  const local = new DestinationGuard(['127.0.0.1'])
  t.notOk(local.refuses(hostOf('http://[::ffff:127.0.0.1]/')), 'mapped 127.0.0.1 is the allowed host')
  t.ok(local.refuses(hostOf('http://[64:ff9b::7f00:1]/')), 'NAT64 to 127.0.0.1 is still refused')
  t.ok(local.refuses(hostOf('http://[2002:7f00:1::]/')), '6to4 of 127.0.0.1 is still refused')
  t.notOk(new DestinationGuard(['64:ff9b::/96']).refuses(hostOf('http://[64:ff9b::a00:1]/')), 'unless the IPv6 range itself is allowed')

  t.throws(() => guard.checkLiteral(new URL('http://example.com:0/')), { code: 'destination_refused' }, 'port 0 is refused')
  for (const u of ['http://localhost./', 'http://LOCALHOST./x', 'http://a.localhost./'])
    t.throws(() => guard.checkLiteral(new URL(u)), { code: 'destination_refused' }, `${u} (fully qualified) is a loopback name`)
})

t.test('a name is resolved at creation: refused when every address it resolves to is internal', async (t) => {
  const table: Record<string, string[]> = {
    'intranet.test': ['10.0.0.5'],
    'dual.test': ['10.0.0.5', '93.184.215.14'],
    'public.test': ['93.184.215.14', '2606:2800:21f:cb07:6820:80da:af6b:8b2c'],
    'nat64.test': ['64:ff9b::a00:5'],
  }
  const guard = new DestinationGuard([], (name, cb) => {
    const list = table[name]
    if (!list) return cb(Object.assign(new Error(`getaddrinfo ENOTFOUND ${name}`), { code: 'ENOTFOUND' }), [])
    cb(null, list.map((address) => ({ address, family: address.includes(':') ? 6 : 4 })))
  })
  await t.rejects(guard.check(new URL('https://intranet.test/h')), { code: 'destination_refused', message: /10\.0\.0\.5/ })
  await t.rejects(guard.check(new URL('https://nat64.test/h')), { code: 'destination_refused' })
  await t.resolves(guard.check(new URL('https://public.test/h')))
  await t.resolves(guard.check(new URL('https://dual.test/h')), 'a name with a public address is accepted (delivery dials only that one)')
  await t.resolves(guard.check(new URL('https://not-yet.test/h')), 'a name that does not resolve yet is accepted: every connection is checked')

  // …and at connect time only the public answers are handed to the socket.
  const connectTo = (name: string) =>
    new Promise<{ err: Error | null; address?: unknown }>((res) => guard.lookup(name, { all: true }, (err, address) => res({ err, address })))
  t.same((await connectTo('dual.test')).address, [{ address: '93.184.215.14', family: 4 }])
  t.match((await connectTo('intranet.test')).err, { code: 'destination_refused' })
})

t.test('the API refuses these destinations with 400 naming url, at create, PATCH and PUT', async (t) => {
  // No allow list here: loopback is as internal as any other private address.
  const { m } = await startWebhookMeterd(t, { exportconfigs: { allow_private_destinations: [] } })
  const key = await m.key()
  const refused = async (url: string, code: string, how: 'POST' | 'PATCH' | 'PUT' = 'POST', id?: string) => {
    const r = await call(how === 'POST' ? api(m) : `${api(m)}/${id}`, { key, method: how, body: { name: 'x', url } })
    t.equal(r.status, 400, `${how} ${url} → 400`)
    t.equal(r.body?.error?.param, 'url', 'names url')
    t.equal(r.body?.error?.code, code)
  }
  for (const u of ['http://[::127.0.0.1]/h', 'http://[::ffff:127.0.0.1]/h', 'http://[64:ff9b::7f00:1]/h', 'http://[64:ff9b::a9fe:a9fe]/h', 'http://[2002:7f00:1::]/h', 'http://[2002:a00:1::]/h'])
    await refused(u, 'destination_refused')
  await refused('https://example.com:0/h', 'invalid_url')

  // A real name this machine resolves through its own hosts file: to a loopback or private address.
  const name = hostname()
  const addresses = await lookup(name, { all: true })
  t.ok(addresses.length > 0 && addresses.every((a) => new DestinationGuard().refuses(a.address)), `${name} resolves to internal addresses here (${addresses.map((a) => a.address)})`)
  await refused(`http://${name}:9/hook`, 'destination_refused')

  // Changing the url of an existing configuration goes through the same check.
  const created = await call(api(m), { key, body: { name: 'ok', url: 'https://[2606:4700:4700::1111]/hook' } })
  t.equal(created.status, 201)
  await refused(`http://${name}:9/hook`, 'destination_refused', 'PATCH', created.body.id)
  await refused('http://[::ffff:7f00:1]/h', 'destination_refused', 'PUT', created.body.id)
  t.equal((await call(`${api(m)}/${created.body.id}`, { key })).body.url, 'https://[2606:4700:4700::1111]/hook', 'the refused changes left it as it was')
})

t.test('a name resolved at delivery reaches an allowed address (the connect-time lookup)', async (t) => {
  const { m, engine } = await startWebhookMeterd(t) // allows 127.0.0.1
  const rx = await startReceiver(t)
  const key = await m.key()
  const url = rx.url.replace('127.0.0.1', 'localhost')
  const created = await call(api(m), { key, body: { name: 'by name', url } })
  t.equal(created.status, 201, 'localhost is accepted when 127.0.0.1 is allowed')
  t.equal((await call(`${api(m)}/${created.body.id}/send-test-event`, { key, body: {} })).status, 202)
  await engine.settle()
  t.equal((await rx.waitFor(1)).length, 1, 'delivered through the name')
})

t.test('a name that resolves to an internal address by the time of delivery is not called: dead-lettered', async (t) => {
  const { m, engine, ext } = await startWebhookMeterd(t, { exportconfigs: { allow_private_destinations: [] } })
  const rx = await startReceiver(t)
  const key = await m.key()
  // As if the name had resolved to a public address at creation and moved since: stored directly.
  const name = hostname()
  const created = await call(api(m), { key, body: { name: 'moved', url: 'https://[2606:4700:4700::1111]/hook' } })
  const config = ext.store!.get(created.body.id)!
  await ext.store!.update({ ...config, url: rx.url.replace('127.0.0.1', name) }, config)
  const sent = await call(`${api(m)}/${config.id}/send-test-event`, { key, body: {} })
  await engine.settle()
  const delivery = (await call(`${api(m)}/${config.id}/deliveries/${sent.body.deliveryId}`, { key })).body
  t.match(delivery, { status: 'dead_lettered', lastError: /destination refused/ }, `${name} resolves to internal addresses only: refused at connect time`)
  t.equal(rx.received.length, 0, 'the receiver on 127.0.0.1 was never called')
})
