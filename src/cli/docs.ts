import type { TSchema } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import { stringify } from 'yaml'
import { FACTORIES } from '../components.js'
import { KINDS, SECTION, type Factory, type Kind } from '../host/component.js'
import { ServerSchema, ServiceSchema, StorageSchema } from '../core/config/schema.js'

/**
 * The configuration reference (docs/configuration.md), rendered from the same TypeBox
 * schemas that validate a config, so the reference cannot drift from the code:
 * `meterd docs` prints it, `npm run docs` writes it, test/docs.test.ts fails when the
 * committed file is stale. The output depends only on the schemas (no dates, no paths).
 */
export function renderConfigReference(factories: readonly Factory[] = FACTORIES): string {
  const out: string[] = []
  out.push(
    '# Configuration reference',
    '',
    '<!-- Generated from the components\' schemas by `npm run docs` (`meterd docs`). Do not edit by hand. -->',
    '',
    'A meterd config is YAML. Several `--config` files are deep-merged in order (maps merge; lists and',
    'scalars are replaced by the later file); without `--config` the embedded `config/meterd.yaml` is',
    'used. Any string may use `${env:VAR}`, `${env:VAR:-default}` (the default when VAR is unset or empty) or',
    '`${env:VAR-default}` (only when it is unset: an empty VAR stays empty). `meterd validate --config f.yaml`',
    'checks a config against this reference without starting anything and names every error by its path;',
    '`meterd print-config` prints the merged config with every default filled in.',
    '',
    'Components are configured under their kind\'s section by id, `type` or `type/name`',
    '(e.g. `exporters: { lmdb: {}, debug/verbose: { … } }`), and only run when the `service`',
    'section uses them. A key marked *required* has no default.',
    '',
    '## Contents',
    '',
    '- [Top level](#top-level): [`server`](#server), [`storage`](#storage), [`service`](#service)',
  )
  for (const kind of KINDS) {
    const list = byKind(factories, kind)
    if (list.length) out.push(`- [${SECTION[kind]}](#${SECTION[kind]}): ${list.map((f) => `[\`${f.type}\`](#${anchor(kind, f.type)})`).join(', ')}`)
  }

  out.push('', '## Top level', '')
  out.push('### server', '', 'The one HTTP listener of the base URL (metering, OTLP/HTTP, analytics, platform and operations routes).', '')
  out.push(...table(ServerSchema, 'server'))
  out.push('', '### storage', '', 'The LMDB environment every component shares.', '')
  out.push(...table(StorageSchema, 'storage'))
  out.push(
    '',
    '### service',
    '',
    'Which configured components run, and how they are wired. Pipeline ids are `signal` or `signal/name`',
    '(signals: `usage`, `traces`, `logs`, `metrics`); each pipeline lists component ids.',
    '',
  )
  out.push(...table(ServiceSchema, 'service'))

  for (const kind of KINDS) {
    const list = byKind(factories, kind)
    if (!list.length) continue
    out.push('', `## ${SECTION[kind]}`, '')
    for (const f of list) {
      out.push(`### ${f.type}`, '', `<a id="${anchor(kind, f.type)}"></a>`, '', `${f.description}.`.replace(/\.\.$/, '.'), '')
      const wiring = 'signals' in f ? `Signals: ${f.signals.map((s) => `\`${s}\``).join(', ')}.` : 'connects' in f ? `Connects: ${f.connects.map(([a, b]) => `\`${a}\` → \`${b}\``).join(', ')}.` : ''
      if (wiring) out.push(wiring, '')
      const rows = table(f.schema, '')
      if (rows.length) out.push(...rows)
      else out.push('No settings.')
      const { value, examples } = defaults(f.schema)
      // A required key has no default: say that its value in the block is only an example.
      const heading = examples.length ? `Defaults (${examples.map((k) => `\`${k}\``).join(', ')}: required, shown with an example):` : 'Defaults:'
      out.push('', heading, '', '```yaml', stringify({ [SECTION[kind]]: { [f.type]: value } }).trimEnd(), '```', '')
    }
  }
  return out.join('\n').replace(/\n{3,}/g, '\n\n').trimEnd() + '\n'
}

function byKind(factories: readonly Factory[], kind: Kind): Factory[] {
  return factories.filter((f) => f.kind === kind).sort((a, b) => a.type.localeCompare(b.type))
}

/** Unique across kinds: a receiver and an exporter may share a type name. */
function anchor(kind: Kind, type: string): string {
  return `${kind}-${type}`.toLowerCase().replace(/[^a-z0-9-]/g, '-')
}

function defaults(schema: TSchema): { value: unknown; examples: string[] } {
  const v = Value.Default(schema, {}) as Record<string, unknown>
  // A required key without a default is shown with its example, so the block works as an override.
  const props = (schema as { properties?: Record<string, TSchema> }).properties ?? {}
  const examples: string[] = []
  for (const key of (schema as { required?: string[] }).required ?? [])
    if (v && typeof v === 'object' && !(key in v) && props[key]?.examples?.length) {
      v[key] = props[key].examples[0]
      examples.push(key)
    }
  return { value: v && typeof v === 'object' && Object.keys(v).length === 0 ? {} : v, examples }
}

interface Row {
  key: string
  type: string
  dflt: string
  description: string
}

/** A Markdown table of every key of an object schema, nested keys dotted (`a.b`, `list[].c`, `map.<key>.d`). */
function table(schema: TSchema, base: string): string[] {
  const rows: Row[] = []
  collect(schema, '', rows, 0)
  if (!rows.length) return []
  const prefix = base ? `${base}.` : ''
  return [
    '| Key | Type | Default | Description |',
    '|---|---|---|---|',
    ...rows.map((r) => `| \`${cell(prefix + r.key)}\` | ${cell(r.type)} | ${cell(r.dflt)} | ${cell(r.description)} |`),
  ]
}

const MAX_DEPTH = 6

function collect(schema: TSchema, path: string, rows: Row[], depth: number): void {
  if (depth > MAX_DEPTH) return
  const s = unwrap(schema)
  if (s.type === 'object' && s.properties) {
    const required = new Set<string>(s.required ?? [])
    for (const [name, prop] of Object.entries<TSchema>(s.properties)) {
      const key = path ? `${path}.${name}` : name
      rows.push(row(key, prop, required.has(name)))
      descend(prop, key, rows, depth)
    }
  }
}

/** Into the object an entry holds: a nested object, a list of objects, or a map of objects. */
function descend(prop: TSchema, key: string, rows: Row[], depth: number): void {
  const p = unwrap(prop)
  if (p.type === 'object' && p.properties) collect(p, key, rows, depth + 1)
  else if (p.type === 'array' && p.items && hasProperties(p.items)) collect(p.items, `${key}[]`, rows, depth + 1)
  else if (p.type === 'object') {
    const value = mapValue(p)
    if (value && hasProperties(value)) collect(value, `${key}.<id>`, rows, depth + 1)
  }
}

function hasProperties(s: TSchema): boolean {
  const u = unwrap(s)
  return u.type === 'object' && !!u.properties && Object.keys(u.properties).length > 0
}

/** `T | null` and single-member unions read as T for descending; the type column still shows the union. */
function unwrap(s: TSchema): TSchema {
  if (Array.isArray(s.anyOf)) {
    const rest = s.anyOf.filter((x: TSchema) => x.type !== 'null')
    if (rest.length === 1) return rest[0]
  }
  return s
}

function mapValue(s: TSchema): TSchema | undefined {
  if (s.patternProperties) return Object.values<TSchema>(s.patternProperties)[0]
  if (s.additionalProperties && typeof s.additionalProperties === 'object') return s.additionalProperties
  return undefined
}

function row(key: string, s: TSchema, required: boolean): Row {
  let dflt = ''
  if (s.default !== undefined) dflt = showDefault(s.default)
  else if (required) dflt = '*required*'
  return { key, type: typeName(s), dflt, description: describe(s) }
}

function showDefault(v: unknown): string {
  if (v !== null && typeof v === 'object' && Object.keys(v).length === 0) return Array.isArray(v) ? '`[]`' : ''
  return '`' + JSON.stringify(v) + '`'
}

function typeName(s: TSchema, nested = false): string {
  if (s.const !== undefined) return JSON.stringify(s.const)
  if (Array.isArray(s.enum)) return s.enum.map((v: unknown) => JSON.stringify(v)).join(' | ')
  if (Array.isArray(s.anyOf)) {
    const t = s.anyOf.map((x: TSchema) => typeName(x, true)).join(' | ')
    return nested ? `(${t})` : t
  }
  if (s.$ref) return String(s.$ref)
  switch (s.type) {
    case 'string':
    case 'integer':
    case 'number':
      return s.type + range(s)
    case 'boolean':
    case 'null':
      return s.type
    case 'array':
      return `${s.items ? typeName(s.items, true) : 'any'}[]`
    case 'object': {
      if (s.properties) return 'object'
      const value = mapValue(s)
      return value ? `map of ${hasProperties(value) ? 'object' : typeName(value, true)}` : 'object'
    }
    default:
      return 'any'
  }
}

function range(s: TSchema): string {
  const parts: string[] = []
  if (s.minimum !== undefined) parts.push(`≥ ${s.minimum}`)
  if (s.exclusiveMinimum !== undefined) parts.push(`> ${s.exclusiveMinimum}`)
  if (s.maximum !== undefined) parts.push(`≤ ${s.maximum}`)
  if (s.exclusiveMaximum !== undefined) parts.push(`< ${s.exclusiveMaximum}`)
  if (s.minLength !== undefined) parts.push(`length ≥ ${s.minLength}`)
  if (s.maxLength !== undefined) parts.push(`length ≤ ${s.maxLength}`)
  if (s.format !== undefined) parts.push(`format ${s.format}`)
  return parts.length ? ` (${parts.join(', ')})` : ''
}

function describe(s: TSchema): string {
  const d = s.description ?? unwrap(s).description ?? ''
  const pattern = unwrap(s).pattern
  return pattern !== undefined ? `${d}${d ? ' ' : ''}(pattern \`${pattern}\`)` : d
}

/** Table cells: one line, pipes escaped (GitHub honours `\|` inside code spans in tables). */
function cell(text: string): string {
  return text.replace(/\r?\n/g, ' ').replace(/\|/g, '\\|')
}
