// A price book file is parsed once per process, and again when it changes; the embedded books
// are read from the JSON the build made of them only when it was made from the same text.
import { createHash } from 'node:crypto'
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { parse } from 'yaml'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { readBookFile } from '../../src/domain/pricing/book-file.js'
import { MediaPriceBook } from '../../src/domain/pricing/media-price-book.js'
import { PriceBook } from '../../src/domain/pricing/price-book.js'
import { DEFAULT_CONFIG_PATH } from '../../src/core/config/load.js'
import { PRICE_BOOKS, writePriceBooks } from '../../scripts/price-books.js'
import { meterd } from '../helpers/cli.js'
import { removeDir, tempDir, writeConfig } from '../helpers/meterd.js'

const sha256 = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex')

const book = (input: string) => `version: test-1
providers:
  acme:
    models:
      acme-1: { effective: 2026-01-01, input: ${input}, output: 2 }
`

t.test('a book file edited while the process runs is read again; an unchanged one is not parsed twice', async (t) => {
  const dir = tempDir('meterd-book-')
  t.teardown(() => removeDir(dir))
  const path = join(dir, 'prices.yaml')
  writeFileSync(path, book('1.25'))
  const input = () => PriceBook.load(path).find('acme', 'acme-1')?.price.input.toString()
  t.equal(input(), '1.25')
  t.equal(readBookFile(path), readBookFile(path), 'the second load takes the document the first parsed')
  t.ok(Object.isFrozen((readBookFile(path) as { providers: object }).providers), 'the shared document cannot be changed by one of its books')
  // Same size, so only the content tells the two apart.
  writeFileSync(path, book('9.75'))
  t.equal(input(), '9.75', 'the edited price is the one found')

  const media = join(dir, 'media.yaml')
  writeFileSync(media, 'version: m-1\nproviders:\n  acme:\n    models:\n      img-1: { effective: 2026-01-01, per_image: 0.04 }\n')
  t.equal(MediaPriceBook.load(media).find('acme', 'img-1')?.perImage?.toString(), '0.04')
  writeFileSync(media, 'version: m-1\nproviders:\n  acme:\n    models:\n      img-1: { effective: 2026-01-01, per_image: 0.08 }\n')
  t.equal(MediaPriceBook.load(media).find('acme', 'img-1')?.perImage?.toString(), '0.08', 'the media book is read again too')
})

t.test('a book that does not parse fails every load with the YAML error, in validate as before', async (t) => {
  const dir = tempDir('meterd-book-')
  t.teardown(() => removeDir(dir))
  const path = join(dir, 'broken.yaml')
  const text = 'version: 1\nproviders:\n  acme: {models: {a: [1, 2}\n'
  writeFileSync(path, text)
  let yamlError = ''
  try {
    parse(text)
  } catch (err) {
    yamlError = (err as Error).message.split('\n')[0]
  }
  t.ok(yamlError, 'the text is not YAML')
  t.throws(() => PriceBook.load(path), { message: new RegExp('^' + yamlError.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')) })
  t.throws(() => PriceBook.load(path), { message: new RegExp('^' + yamlError.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')) }, 'a failed parse is not remembered')
  const cfg = writeConfig(dir, { processors: { pricing: { price_book: path } } })
  const v = await meterd(['validate', '--config', DEFAULT_CONFIG_PATH, '--config', cfg])
  t.equal(v.code, 78)
  t.match(v.stderr, `  processors.pricing.price_book: cannot load the price book: ${yamlError}`)
})

t.test('the build writes each embedded book as JSON equal to its YAML, once per change of the text', async (t) => {
  const root = tempDir('meterd-books-')
  t.teardown(() => removeDir(root))
  mkdirSync(join(root, 'config'))
  for (const name of PRICE_BOOKS) copyFileSync(join(PACKAGE_ROOT, 'config', `${name}.yaml`), join(root, 'config', `${name}.yaml`))
  t.strictSame(await writePriceBooks(root), PRICE_BOOKS)
  for (const name of PRICE_BOOKS) {
    const yaml = join(root, 'config', `${name}.yaml`)
    const json = JSON.parse(readFileSync(join(root, 'dist', 'config', `${name}.json`), 'utf8'))
    t.equal(json.sha256, sha256(yaml), `${name}.json names the text it came from`)
    t.strictSame(json.book, parse(readFileSync(yaml, 'utf8')), `${name}.json holds what parsing ${name}.yaml gives`)
  }
  t.strictSame(await writePriceBooks(root), [], 'unchanged books are not written again')

  // The loader, with this folder as the embedded one.
  const embedded = { dir: join(root, 'config'), parsedDir: join(root, 'dist', 'config') }
  const yaml = join(root, 'config', 'prices.yaml')
  const jsonPath = join(root, 'dist', 'config', 'prices.json')
  // A JSON whose book differs from the YAML, under the YAML's hash: only a read of the JSON finds this version.
  const json = JSON.parse(readFileSync(jsonPath, 'utf8'))
  writeFileSync(jsonPath, JSON.stringify({ sha256: json.sha256, book: { ...json.book, version: 'from-the-json' } }))
  t.equal((readBookFile(yaml, embedded) as { version: string }).version, 'from-the-json', 'a JSON made from this text is used')
  writeFileSync(yaml, readFileSync(yaml, 'utf8').replace(/^version: .*$/m, 'version: edited'))
  t.equal((readBookFile(yaml, embedded) as { version: string }).version, 'edited', 'after an edit the JSON no longer matches: the YAML is parsed')
  writeFileSync(jsonPath, '{"sha256": "')
  writeFileSync(yaml, readFileSync(yaml, 'utf8').replace(/^version: .*$/m, 'version: edited-again'))
  t.equal((readBookFile(yaml, embedded) as { version: string }).version, 'edited-again', 'a damaged JSON is passed over')
  t.strictSame(await writePriceBooks(root), ['prices'], 'the build writes the edited book again')
  t.equal(JSON.parse(readFileSync(jsonPath, 'utf8')).book.version, 'edited-again')

  writeFileSync(yaml, 'providers: [unclosed\n')
  t.strictSame(await writePriceBooks(root), [], 'a book that does not parse is not written')
  t.notOk(existsSync(jsonPath), 'and its old JSON is gone: validate reports the YAML')
})

t.test("this build's JSON of the embedded books, where made from today's YAML, is that YAML", async (t) => {
  for (const name of PRICE_BOOKS) {
    const jsonPath = join(PACKAGE_ROOT, 'dist', 'config', `${name}.json`)
    if (!existsSync(jsonPath)) {
      t.comment(`${jsonPath} is not built (npm run build): the YAML is parsed`)
      continue
    }
    const yaml = join(PACKAGE_ROOT, 'config', `${name}.yaml`)
    const json = JSON.parse(readFileSync(jsonPath, 'utf8'))
    if (json.sha256 !== sha256(yaml)) {
      t.comment(`${name}.json was made from an older ${name}.yaml and is not used; npm run build writes it again`)
      continue
    }
    t.strictSame(json.book, parse(readFileSync(yaml, 'utf8')), `dist/config/${name}.json`)
  }
})
