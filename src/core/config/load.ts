import { closeSync, openSync, readSync } from 'node:fs'
import { join } from 'node:path'
import { parse as parseYaml, parseDocument } from 'yaml'
import type { ConfigIssue } from './schema.js'
import { PACKAGE_ROOT } from '../paths.js'

/** The embedded default config, used when no --config is given. */
export const DEFAULT_CONFIG_PATH = join(PACKAGE_ROOT, 'config', 'meterd.yaml')

export class ConfigError extends Error {
  constructor(readonly issues: ConfigIssue[]) {
    super(issues.map((i) => `${i.path}: ${i.message}`).join('\n'))
  }
}

type Json = null | boolean | number | string | Json[] | { [k: string]: Json }

/**
 * Reads the files, expands `${env:VAR}`, `${env:VAR:-default}` and `${env:VAR-default}` in
 * every string, and deep-merges them in order (maps merge, everything else — lists too — is
 * replaced by the later file), as the Collector does with several --config flags.
 */
export function loadConfigFiles(files: string[], env: NodeJS.ProcessEnv = process.env): Record<string, unknown> {
  const issues: ConfigIssue[] = []
  let merged: Json = {}
  for (const file of files.length ? files : [DEFAULT_CONFIG_PATH]) {
    let text: string
    try {
      text = readCapped(file)
    } catch (err) {
      issues.push({ path: file, message: `cannot read: ${(err as Error).message}` })
      continue
    }
    const doc = parseDocument(text, { prettyErrors: true })
    if (doc.errors.length) {
      for (const e of doc.errors) issues.push({ path: file, message: e.message.split('\n')[0] })
      continue
    }
    let value: Json
    try {
      // Aliases are resolved here: an alias bomb, an undefined or a self-referencing alias throws.
      value = (doc.toJS() ?? {}) as Json
    } catch (err) {
      issues.push({ path: file, message: `cannot be read as YAML: ${(err as Error).message}` })
      continue
    }
    if (typeof value !== 'object' || Array.isArray(value) || value === null) {
      issues.push({ path: file, message: 'the top level must be a map' })
      continue
    }
    try {
      merged = deepMerge(merged, expandEnv(value, '', env, issues))
    } catch (err) {
      // `a: &x [*x]` is a value that contains itself: walking it never ends.
      if (!(err instanceof RangeError)) throw err
      issues.push({ path: file, message: 'cannot be read as YAML: an alias refers to its own anchor, or the nesting is too deep' })
    }
  }
  if (issues.length) throw new ConfigError(issues)
  return merged as Record<string, unknown>
}

/** Far past any real config: a larger file (or /dev/zero) is refused rather than read until memory runs out. */
export const MAX_CONFIG_BYTES = 16 * 1024 * 1024

/** The file's text, read in chunks so a device or a pipe is read too (`--config <(...)`), up to MAX_CONFIG_BYTES. */
function readCapped(file: string): string {
  const fd = openSync(file, 'r')
  try {
    const chunks: Buffer[] = []
    let total = 0
    for (;;) {
      const chunk = Buffer.allocUnsafe(64 * 1024)
      const n = readSync(fd, chunk, 0, chunk.length, null)
      if (n === 0) break
      total += n
      if (total > MAX_CONFIG_BYTES) throw new Error(`larger than ${MAX_CONFIG_BYTES / 1024 / 1024} MiB: not a config file`)
      chunks.push(chunk.subarray(0, n))
    }
    return Buffer.concat(chunks).toString('utf8')
  } finally {
    closeSync(fd)
  }
}

export function deepMerge(a: Json, b: Json): Json {
  if (isMap(a) && isMap(b)) {
    const out: { [k: string]: Json } = { ...a }
    for (const [k, v] of Object.entries(b)) out[k] = k in out ? deepMerge(out[k], v) : v
    return out
  }
  return b
}

const isMap = (v: Json): v is { [k: string]: Json } => typeof v === 'object' && v !== null && !Array.isArray(v)

// `${env:VAR:-default}`: the default when VAR is unset or empty; `${env:VAR-default}`: only when
// it is unset, so an empty VAR stays empty (as in the shell) — how `METERD_OTLP_GRPC_ENDPOINT=`
// turns a listener off in the embedded config.
const ENV_REF = /\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?:(:?)-([^}]*))?\}/g
const WHOLE_ENV_REF = /^\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?:(:?)-([^}]*))?\}$/

function expandEnv(value: Json, path: string, env: NodeJS.ProcessEnv, issues: ConfigIssue[]): Json {
  if (typeof value === 'string') {
    const resolve = (name: string, colon: string | undefined, def: string | undefined): string => {
      const v = env[name]
      if (v !== undefined && (v !== '' || colon === '')) return v
      if (def !== undefined) return def
      issues.push({ path, message: `environment variable ${name} is not set and has no default` })
      return ''
    }
    const whole = WHOLE_ENV_REF.exec(value)
    if (whole) {
      // A scalar that is exactly one reference takes the type its value has in YAML
      // (`port: ${env:PORT:-8080}` is a number), as in the Collector.
      const text = resolve(whole[1], whole[2], whole[3])
      if (text.trim() === '') return text // an empty default means an empty string, not YAML's null
      try {
        const typed = parseYaml(text) as Json
        return typeof typed === 'object' && typed !== null ? text : typed
      } catch {
        return text
      }
    }
    return value.replace(ENV_REF, (_, name: string, colon: string | undefined, def: string | undefined) => resolve(name, colon, def))
  }
  if (Array.isArray(value)) return value.map((v, i) => expandEnv(v, `${path}[${i}]`, env, issues))
  if (isMap(value)) {
    const out: { [k: string]: Json } = {}
    for (const [k, v] of Object.entries(value)) out[k] = expandEnv(v, path ? `${path}.${k}` : k, env, issues)
    return out
  }
  return value
}
