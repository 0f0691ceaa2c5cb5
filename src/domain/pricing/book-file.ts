import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { basename, dirname, extname, join } from 'node:path'
import { parse } from 'yaml'
import { PACKAGE_ROOT } from '../../core/paths.js'

/**
 * Where the embedded price books are (`config/`) and where the build writes them already parsed
 * (`dist/config/<name>.json`, by scripts/price-books.js).
 */
export interface EmbeddedBooks {
  dir: string
  parsedDir: string
}

export const EMBEDDED_BOOKS: EmbeddedBooks = { dir: join(PACKAGE_ROOT, 'config'), parsedDir: join(PACKAGE_ROOT, 'dist', 'config') }

/** The parsed document of each book file read in this process, with the SHA-256 of the text it came from. */
const read = new Map<string, { sha256: string; doc: unknown }>()

/**
 * The parsed YAML of a price book file, parsed once per process: a start loads each book twice
 * (the config check, then the pricing processor's start) and parsing the 29 KB token book is
 * most of that (docs/performance.md). The memo is keyed by the file's content, so a file edited
 * since is parsed afresh. The document is frozen: every book loaded from the file shares it.
 *
 * An embedded book (`config/prices.yaml`, `config/media-prices.yaml`) is taken from the JSON the
 * build wrote beside the compiled code when that JSON was made from this very text (same
 * SHA-256); otherwise, and for any other file, the YAML is parsed. The YAML stays the only source.
 */
export function readBookFile(path: string, embedded: EmbeddedBooks = EMBEDDED_BOOKS): unknown {
  const bytes = readFileSync(path)
  const sha256 = createHash('sha256').update(bytes).digest('hex')
  const known = read.get(path)
  if (known?.sha256 === sha256) return known.doc
  const doc = deepFreeze((dirname(path) === embedded.dir && parsedBook(join(embedded.parsedDir, basename(path, extname(path)) + '.json'), sha256)) || parse(bytes.toString('utf8')))
  read.set(path, { sha256, doc })
  return doc
}

/** The book in a JSON the build wrote, if it was made from the text whose hash is `sha256`. */
function parsedBook(path: string, sha256: string): unknown {
  try {
    const parsed = JSON.parse(readFileSync(path, 'utf8')) as { sha256?: unknown; book?: unknown }
    return parsed.sha256 === sha256 ? parsed.book : undefined
  } catch {
    return undefined // not built (tests from source, a package without dist/config) or unreadable: parse the YAML
  }
}

function deepFreeze<T>(v: T): T {
  if (v && typeof v === 'object' && !Object.isFrozen(v)) {
    Object.freeze(v)
    for (const x of Object.values(v)) deepFreeze(x)
  }
  return v
}
