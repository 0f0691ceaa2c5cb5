// doc_url in every error body points to something real: the daemon's own /docs/errors.
import t from 'tap'
import { call, startMeterd } from '../helpers/meterd.js'

t.test("an error's doc_url answers with the reference section of its code", async (t) => {
  const m = await startMeterd(t)
  const key = await m.key()
  const errors = [
    await call(m.url + '/meter/v2/ai/completions', { body: {} }), // no key
    await call(m.url + '/meter/v2/ai/completions', { key, body: { model: 'x' } }), // a missing field
    await call(m.url + '/no/such/route', { key }),
  ]
  for (const e of errors) {
    const { code, doc_url } = e.body.error
    t.match(doc_url, new RegExp(`^${m.url}/docs/errors#${code}$`), `${code}: doc_url is on the daemon that answered`)
    const page = await fetch(doc_url)
    t.equal(page.status, 200, `${code}: doc_url answers 200`)
    t.match(page.headers.get('content-type'), /^text\/markdown/)
    t.match(await page.text(), new RegExp(`^## ${code}$`, 'm'), `${code}: the page has its section`)
  }
})
