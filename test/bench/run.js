#!/usr/bin/env node
/**
 * `npm run bench [-- FILTER...]`: runs every test/bench/*.bench.js, one after the other,
 * each in its own child process (so one bench's heap and sockets never skew the next),
 * with its output passed straight through. A FILTER keeps the benches whose file name
 * contains it (`npm run bench -- ingest`). Exits non-zero when a bench crashes (a non-zero
 * exit or a signal) or when no bench matches; a missed target is reported by the bench
 * itself and is not a crash.
 */
import { spawn } from 'node:child_process'
import { readdirSync } from 'node:fs'
import { basename, dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const here = dirname(fileURLToPath(import.meta.url))
const filters = process.argv.slice(2).filter((a) => !a.startsWith('-'))
const all = readdirSync(here)
  .filter((f) => f.endsWith('.bench.js'))
  .sort()
const chosen = filters.length ? all.filter((f) => filters.some((x) => f.includes(x))) : all

if (chosen.length === 0) {
  process.stderr.write(`bench: nothing matches ${filters.join(', ')} (have: ${all.map((f) => basename(f, '.bench.js')).join(', ') || 'none'})\n`)
  process.exit(1)
}

const results = []
for (const file of chosen) {
  const name = basename(file, '.bench.js')
  process.stdout.write(`\n### ${name} (${file})\n`)
  const started = Date.now()
  const outcome = await new Promise((resolve) => {
    const child = spawn(process.execPath, [join(here, file)], { stdio: 'inherit', cwd: join(here, '..', '..') })
    child.on('error', (err) => resolve(`could not start: ${err.message}`))
    child.on('exit', (code, signal) => resolve(code === 0 ? null : signal ? `killed by ${signal}` : `exit code ${code}`))
  })
  results.push({ name, outcome, seconds: (Date.now() - started) / 1000 })
}

process.stdout.write('\n### summary\n')
for (const r of results) process.stdout.write(`  ${r.name.padEnd(20)} ${r.outcome ? `CRASHED (${r.outcome})` : 'ran'}  ${r.seconds.toFixed(1)} s\n`)
const crashed = results.filter((r) => r.outcome)
if (crashed.length) {
  process.stderr.write(`bench: ${crashed.length} of ${results.length} crashed: ${crashed.map((r) => r.name).join(', ')}\n`)
  process.exit(1)
}
