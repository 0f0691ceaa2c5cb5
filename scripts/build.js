#!/usr/bin/env node
// Compiles src/ to dist/ with tsc. With --if-stale (npm start, npm test, npm ci's prepare) it
// first compares modification times and does nothing, in a few milliseconds, when no source
// changed since the last build — so `npm start` does not wait for tsc every time. Either way it
// then brings the parsed price books in dist/config/ up to date with config/ (./price-books.js).
import { spawnSync } from 'node:child_process'
import { existsSync, readdirSync, statSync, utimesSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { writePriceBooks } from './price-books.js'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const stamp = join(root, 'dist', '.build-stamp')
const ifStale = process.argv.includes('--if-stale')
const inputs = ['src', 'tsconfig.json', 'package.json'].map((p) => join(root, p))

/** The newest modification time under a path (a directory's own time moves when a file is added or removed). */
function newest(path) {
  const st = statSync(path)
  let m = st.mtimeMs
  if (st.isDirectory()) for (const e of readdirSync(path)) m = Math.max(m, newest(join(path, e)))
  return m
}

// An installed package (or the Docker image's dependency stage) has no sources to build.
if (!existsSync(join(root, 'src'))) process.exit(0)

if (ifStale && existsSync(stamp) && existsSync(join(root, 'dist', 'src', 'cli', 'main.js'))) {
  const built = statSync(stamp).mtimeMs
  if (inputs.every((p) => !existsSync(p) || newest(p) <= built)) {
    await writePriceBooks(root)
    process.exit(0)
  }
}

let tsc
try {
  tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc')
} catch {
  process.stderr.write('meterd build: typescript is not installed (npm ci installs it); dist/ was not rebuilt\n')
  process.exit(ifStale && existsSync(join(root, 'dist')) ? 0 : 1)
}
const started = new Date()
const r = spawnSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.json')], { stdio: 'inherit', cwd: root })
if (r.status !== 0) process.exit(r.status ?? 1)
// Stamped with the time the build started: a source saved during the build is built next time.
writeFileSync(stamp, '')
utimesSync(stamp, started, started)
await writePriceBooks(root)
