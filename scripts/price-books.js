// The embedded price books, parsed at build time: dist/config/<name>.json holds the YAML's
// document and the SHA-256 of the text it came from. A start uses it instead of parsing the YAML
// (the 29 KB token book costs 100-200 ms of CPU to parse) when the hashes match
// (src/domain/pricing/book-file.ts); config/*.yaml stays the only source, and the JSON is never
// committed.
import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

export const PRICE_BOOKS = ['prices', 'media-prices']

/** Writes each book whose JSON is missing or was made from another text; returns the names written. */
export async function writePriceBooks(root) {
  const written = []
  for (const name of PRICE_BOOKS) {
    const source = join(root, 'config', `${name}.yaml`)
    if (!existsSync(source)) continue
    const bytes = readFileSync(source)
    const sha256 = createHash('sha256').update(bytes).digest('hex')
    const out = join(root, 'dist', 'config', `${name}.json`)
    if (madeFrom(out) === sha256) continue
    let book
    try {
      // The same call, on the same text, as the loader's fallback.
      const { parse } = await import('yaml')
      book = parse(bytes.toString('utf8'))
    } catch {
      // A book that does not parse is reported by `meterd validate` from the YAML, as without a build.
      rmSync(out, { force: true })
      continue
    }
    mkdirSync(join(root, 'dist', 'config'), { recursive: true })
    // Renamed into place: a daemon starting meanwhile reads the old JSON or the new, never half of one.
    writeFileSync(`${out}.${process.pid}`, JSON.stringify({ sha256, book }))
    renameSync(`${out}.${process.pid}`, out)
    written.push(name)
  }
  return written
}

function madeFrom(path) {
  try {
    return JSON.parse(readFileSync(path, 'utf8')).sha256
  } catch {
    return undefined
  }
}
