import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { renderConfigReference } from '../src/cli/docs.js'
import { FACTORIES } from '../src/components.js'
import { PACKAGE_ROOT } from '../src/core/paths.js'

const FILE = join(PACKAGE_ROOT, 'docs', 'configuration.md')

t.test('docs/configuration.md is the reference the schemas generate', async (t) => {
  let committed = ''
  try {
    committed = readFileSync(FILE, 'utf8')
  } catch {}
  const rendered = renderConfigReference()
  if (committed === rendered) return t.pass('up to date')
  // Name the first differing line, so the failure says what changed.
  const a = committed.split('\n')
  const b = rendered.split('\n')
  let i = 0
  while (i < a.length && i < b.length && a[i] === b[i]) i++
  t.fail(`docs/configuration.md is stale: run \`npm run docs\` and commit the result`, {
    line: i + 1,
    committed: a[i] ?? '(end of file)',
    generated: b[i] ?? '(end of file)',
  })
})

t.test('the reference covers every component and every key of its schema', async (t) => {
  const md = renderConfigReference()
  for (const f of FACTORIES) {
    t.match(md, new RegExp(`<a id="${f.kind}-${f.type}"></a>`), `${f.kind} ${f.type} has a section`)
    for (const key of Object.keys((f.schema as { properties?: object }).properties ?? {}))
      t.match(md, `| \`${key}\` |`, `${f.kind} ${f.type}: ${key} is documented`)
  }
  t.match(md, '| `server.endpoint` |', 'top-level server keys are documented')
  t.match(md, '| `storage.path` |', 'top-level storage keys are documented')
})

t.test('a Defaults block says which of its values are only examples of required keys', async (t) => {
  const md = renderConfigReference()
  // The upstream exporter has no default endpoint or api_key: its block must not pass them off as defaults.
  const block = md.slice(md.indexOf('<a id="exporter-upstream"></a>'))
  const heading = /\n(Defaults[^\n]*):\n/.exec(block)?.[1]
  t.equal(heading, 'Defaults (`endpoint`, `api_key`: required, shown with an example)')
  t.match(block.slice(block.indexOf(heading!)), 'endpoint: https://meterd-gateway:8080', 'the example is still shown, so the block works as an override')
  const lmdb = md.slice(md.indexOf('<a id="exporter-lmdb"></a>'))
  t.match(lmdb, /\nDefaults:\n/, 'a component without required keys keeps the plain heading')
})

t.test('docs/errors.md has a section for every error code the source answers', async (t) => {
  const { readdirSync } = await import('node:fs')
  const files = (readdirSync(join(PACKAGE_ROOT, 'src'), { recursive: true }) as string[]).filter((f) => f.endsWith('.ts'))
  const codes = new Set<string>()
  const patterns = [
    /new ApiError\(\s*\d{3},\s*'[a-z_]+',\s*'([a-z_]+)'/g, // new ApiError(status, type, code, ...)
    /\b(?:invalid|conflict)\(\s*'([a-z_]+)'/g, // invalid(code, ...), conflict(code, ...)
    /new PermanentError\([^)]*?,\s*'([a-z_]+)'/g, // new PermanentError(message, code, ...)
    /\bcode: '([a-z_]+)'/g, // field problems
    /new ApiError\(\s*\d{3},\s*'[a-z_]+',\s*[\w.]+ \? '([a-z_]+)' : '([a-z_]+)'/g, // a code chosen by a condition
  ]
  for (const f of files) {
    if (f.startsWith('webhooks/verify') || f.startsWith('cli/')) continue // verification reasons are not API errors
    const text = readFileSync(join(PACKAGE_ROOT, 'src', f), 'utf8')
    for (const re of patterns) for (const m of text.matchAll(re)) for (const c of m.slice(1)) if (c) codes.add(c)
  }
  const doc = readFileSync(join(PACKAGE_ROOT, 'docs', 'errors.md'), 'utf8')
  const headings = new Set([...doc.matchAll(/^## ([a-z_]+)$/gm)].map((m) => m[1]))
  t.ok(codes.size > 20, `found the codes (${codes.size})`)
  const missing = [...codes].filter((c) => !headings.has(c)).sort()
  t.same(missing, [], `every code has a "## <code>" section in docs/errors.md (doc_url points there); add: ${missing.join(', ')}`)
  // The other way round: a client must not be told to handle a code meterd cannot answer.
  const unknown = [...headings].filter((h) => !codes.has(h)).sort()
  t.same(unknown, [], `every "## <code>" section of docs/errors.md is a code the source answers; remove: ${unknown.join(', ')}`)
  // The status table at the top links every section once, and nothing else.
  const table = doc.slice(doc.indexOf('| Status | Codes |'), doc.indexOf('\n---'))
  const linked = [...table.matchAll(/\[`([a-z_]+)`\]\(#\1\)/g)].map((m) => m[1]).sort()
  t.same(linked, [...headings].sort(), 'the status table links every code section of docs/errors.md once')
})
