// Every YAML snippet in README.md and docs/*.md works as an override of the embedded default
// (`meterd validate --config config/meterd.yaml --config snippet.yaml`), and, since merging
// replaces lists, a snippet that sets a list of the default's service section carries the
// whole list. A snippet that is not an override is marked `<!-- not-an-override: why -->`
// (rare); one that drops entries on purpose says so with `<!-- replaces-lists: why -->`, and one
// meant to be used over the snippet before it with `<!-- with-previous ... -->`.
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { parse } from 'yaml'
import { FACTORIES } from '../src/components.js'
import { DEFAULT_CONFIG_PATH } from '../src/core/config/load.js'
import { resolveConfig } from '../src/host/resolve.js'
import { factoryMap, runnableIssues } from '../src/host/graph.js'
import { PACKAGE_ROOT } from '../src/core/paths.js'
import { removeDir, tempDir } from './helpers/meterd.js'

interface Snippet {
  file: string
  line: number
  text: string
  marks: string
}

function snippets(): Snippet[] {
  const files = ['README.md', ...readdirSync(join(PACKAGE_ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)]
  const out: Snippet[] = []
  for (const file of files) {
    const lines = readFileSync(join(PACKAGE_ROOT, file), 'utf8').split('\n')
    for (let i = 0; i < lines.length; i++) {
      if (lines[i].trim() !== '```yaml') continue
      let j = i + 1
      while (j < lines.length && lines[j].trim() !== '```') j++
      // Marks sit in the lines just above the fence.
      const marks = lines.slice(Math.max(0, i - 3), i).join('\n')
      out.push({ file, line: i + 1, text: lines.slice(i + 1, j).join('\n'), marks })
      i = j
    }
  }
  return out
}

const DEFAULT = parse(readFileSync(DEFAULT_CONFIG_PATH, 'utf8'))

/** The service lists the snippet sets that miss entries of the default's same list. */
function droppedEntries(snippet: any): string[] {
  const problems: string[] = []
  const compare = (path: string, mine: unknown, theirs: unknown) => {
    if (!Array.isArray(mine) || !Array.isArray(theirs)) return
    const missing = theirs.filter((x) => !mine.includes(x))
    if (missing.length) problems.push(`${path} drops ${missing.join(', ')} (lists are replaced, not merged: list every entry)`)
  }
  const s = snippet?.service ?? {}
  compare('service.extensions', s.extensions, DEFAULT.service.extensions)
  for (const [pid, p] of Object.entries<any>(s.pipelines ?? {}))
    for (const field of ['receivers', 'processors', 'exporters']) compare(`service.pipelines.${pid}.${field}`, p?.[field], DEFAULT.service.pipelines[pid]?.[field])
  return problems
}

t.test('every YAML snippet of the docs is a valid override of the embedded default', async (t) => {
  const all = snippets()
  t.ok(all.length >= 20, `found the snippets (${all.length})`)
  const dir = tempDir('meterd-snippets-')
  t.teardown(() => removeDir(dir))
  const factories = factoryMap(FACTORIES)
  const marked = all.filter((s) => s.marks.includes('<!-- not-an-override'))
  t.ok(marked.length <= 2, `few snippets are exempt (${marked.map((s) => `${s.file}:${s.line}`).join(', ')})`)
  let previous: { file: string; path: string } | undefined
  for (const s of all) {
    if (marked.includes(s)) continue
    const where = `${s.file}:${s.line}`
    const path = join(dir, `snippet-${s.file.replace(/\W/g, '_')}-${s.line}.yaml`)
    await import('node:fs').then((fs) => fs.writeFileSync(path, s.text))
    // `<!-- with-previous -->`: the doc says to use it over the snippet before it, in that file.
    const files = s.marks.includes('with-previous') && previous?.file === s.file ? [DEFAULT_CONFIG_PATH, previous.path, path] : [DEFAULT_CONFIG_PATH, path]
    previous = { file: s.file, path }
    // No environment but the sidecar's key to its gateway, which the docs say to set: a snippet
    // must not need a variable the reader has not been told about.
    const r = resolveConfig(files, factories, { METERD_UPSTREAM_API_KEY: 'hak_default_sidecarsidecarsidecarsidecar' })
    const issues = r.issues.length ? r.issues : runnableIssues(r.config)
    t.same(issues.map((i) => `${i.path}: ${i.message}`), [], `${where} validates as an override`)
    if (!/<!-- (with-previous )?replaces-lists/.test(s.marks)) t.same(droppedEntries(parse(s.text)), [], `${where} keeps the default's list entries`)
  }
})

// Every `meterd COMMAND --flag` the README and docs show (commands in code blocks and in prose,
// `node bin/meterd.js …` included) is a command of the CLI's table with that option, so a renamed
// or removed flag cannot linger in the docs. Flags shown on purpose as wrong ones are listed here.
const WRONG_ON_PURPOSE = new Set(['--no-such-flag', '--bogus'])

/** `[file:line, command, flag]` for every flag given to a meterd command in the docs. */
function documentedFlags(commandNames: string[]): [string, string, string][] {
  const files = ['README.md', 'Dockerfile', 'docker-compose.yml', ...readdirSync(join(PACKAGE_ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)]
  // Two-word commands first, so `keys create` is not read as a `keys` command.
  const names = [...commandNames].sort((a, b) => b.length - a.length).map((n) => n.replace(/ /g, ' +'))
  const invocation = new RegExp(`\\bmeterd(?:\\.js)? +(${names.join('|')})(?![\\w-])((?: +(?!#)[^\\s\`|;&)#]+)*)`, 'g')
  const out: [string, string, string][] = []
  for (const file of files) {
    const lines = readFileSync(join(PACKAGE_ROOT, file), 'utf8').split('\n')
    lines.forEach((line, i) => {
      for (const m of line.matchAll(invocation))
        for (const f of m[2].matchAll(/(?<![\w-])(--[a-z][a-z-]*)/g)) out.push([`${file}:${i + 1}`, m[1].replace(/ +/g, ' '), f[1]])
    })
  }
  return out
}

t.test('every meterd command and flag the docs show is one the CLI has', async (t) => {
  const { COMMANDS } = await import('../src/cli/main.js')
  const flags = documentedFlags(COMMANDS.map((c) => c.name))
  t.ok(flags.length >= 30, `found the documented flags (${flags.length})`)
  const unknown = flags
    .filter(([, command, flag]) => {
      if (flag === '--help' || WRONG_ON_PURPOSE.has(flag)) return false
      const c = COMMANDS.find((c) => c.name === command)!
      return !Object.hasOwn(c.options, flag.slice(2))
    })
    .map(([where, command, flag]) => `${where}: meterd ${command} ${flag}`)
  t.same(unknown, [], 'every flag shown is an option of its command (`meterd COMMAND --help`)')
})
