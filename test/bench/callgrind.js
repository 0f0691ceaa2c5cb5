/**
 * What the benches that count instructions share (cpu-per-request, cluster-cpu, otlp-cpu):
 * the check that valgrind is installed, `callgrind_control`, reading a dump's totals per thread
 * with the parts of it that are counted apart, and the ingest load of fresh completions.
 */
import { execFile, execFileSync } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { Agent, request as httpRequest } from 'node:http'
import { join } from 'node:path'
import { bodyTemplate, header, line } from './lib.js'

/** Exits 0 with a header saying so when valgrind (and its callgrind_control) is not installed. */
export function requireCallgrind(bench) {
  try {
    execFileSync('valgrind', ['--version'], { stdio: 'ignore' })
    execFileSync('callgrind_control', ['-h'], { stdio: 'ignore' })
  } catch {
    header(`${bench}: valgrind (callgrind) is not installed; skipped`)
    process.exit(0)
  }
}

export const control = (pid, ...args) =>
  new Promise((resolve, reject) =>
    execFile('callgrind_control', [...args, String(pid)], { timeout: 120_000 }, (err, stdout) => (err ? reject(err) : resolve(stdout))),
  )

/** V8's optimizing compiler: under load its threads lag behind the warm-up, so its work is counted apart. */
export const COMPILER = (name) => name.includes('v8::internal::compiler::')

/**
 * The instructions (Ir) of the newest dump callgrind wrote for `pid` in `dir`, per thread
 * (`--separate-threads=yes` writes one file per thread: cg.<pid>.<n>-<thread>), busiest first.
 * Each thread also gets, for every entry of `parts` (name → predicate on a function's name),
 * the own instructions of the functions it matches and their names (`<name>Fns`); `compiling`
 * (V8's optimizing compiler) always.
 */
export function lastDump(dir, pid, parts = {}) {
  const files = readdirSync(dir).filter((f) => f.startsWith(`cg.${pid}.`))
  const seq = (f) => Number(/^cg\.\d+\.(\d+)/.exec(f)?.[1] ?? -1)
  const last = Math.max(...files.map(seq))
  if (!files.length || last < 0) throw new Error(`callgrind wrote no dump for ${pid} in ${dir}`)
  const threads = files
    .filter((f) => seq(f) === last)
    .map((f) => {
      const text = readFileSync(join(dir, f), 'utf8')
      const m = /^totals: (\d+)/m.exec(text) ?? /^summary: (\d+)/m.exec(text)
      return { thread: Number(/-(\d+)$/.exec(f)?.[1] ?? 1), ir: m ? Number(m[1]) : 0, ...ownCosts(text, { compiling: COMPILER, ...parts }), file: join(dir, f) }
    })
  return threads.sort((a, b) => b.ir - a.ir)
}

/**
 * The own instructions of the functions each predicate of `parts` matches, and their names.
 * Callgrind's files name each function once (`fn=(id) name` or `cfn=(id) name`) and refer to it
 * by id after; a cost line is position(s) then the Ir count (the last number), and the inclusive
 * cost of a call follows a `calls=` line (skipped).
 */
function ownCosts(text, parts) {
  const keys = Object.keys(parts)
  const out = {}
  for (const k of keys) (out[k] = 0), (out[`${k}Fns`] = new Set())
  const names = new Map()
  let current // the key of parts the current function falls under, if any
  let skip = false
  for (const l of text.split('\n')) {
    if (l.startsWith('cfn=')) {
      const m = /^cfn=\((\d+)\) (.*)$/.exec(l)
      if (m) names.set(m[1], m[2])
    } else if (l.startsWith('fn=')) {
      const m = /^fn=\((\d+)\)(?: (.*))?$/.exec(l)
      if (m) {
        if (m[2] !== undefined) names.set(m[1], m[2])
        const name = names.get(m[1]) ?? ''
        current = keys.find((k) => parts[k](name))
        if (current !== undefined) out[`${current}Fns`].add(name.replace(/'\d+$/, ''))
      }
    } else if (/^[+-]?\d/.test(l)) {
      const fields = l.trim().split(/\s+/)
      const ir = Number(fields[fields.length - 1])
      if (!skip && current !== undefined && Number.isFinite(ir)) out[current] += ir
      skip = false
      continue
    }
    skip = l.startsWith('calls=')
  }
  for (const k of keys) out[`${k}Fns`] = [...out[`${k}Fns`]]
  return out
}

const PATH = '/meter/v2/ai/completions'
const [before, after] = bodyTemplate()
const run = `${process.pid.toString(36)}-${Date.now().toString(36)}`
let seq = 0

/** The body of the bench's completion with the transactionId the next request gets (its bytes are what the 201's signature hashes). */
export const completionBody = (n = seq) => `${before}cpu-${run}-${n.toString(36)}${after}`

/**
 * Sends `count` POSTs of a completion, each with a fresh transactionId, with `connections` in
 * flight; resolves when every answer is in. Throws on a non-2xx, except a 503 when
 * `count503` is set: those are counted and printed (the record was not stored).
 */
export function loadCompletions(url, key, count, connections, { count503 = false } = {}) {
  const agent = new Agent({ keepAlive: true, maxSockets: connections })
  const { hostname, port } = new URL(url)
  let sent = 0
  let bad = 0
  let unavailable = 0
  const codes = new Map()
  let lastBad = ''
  let resets = 0
  const one = () =>
    new Promise((resolve, reject) => {
      const body = completionBody(seq++)
      const req = httpRequest(
        { agent, hostname, port, path: PATH, method: 'POST', headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-api-key': key } },
        (res) => {
          const chunks = []
          res.on('data', (c) => chunks.push(c))
          res.on('end', () => {
            if (count503 && res.statusCode === 503) {
              unavailable++
              // Which 503 it was: its code says which part could not serve it.
              let code = '?'
              try {
                code = JSON.parse(Buffer.concat(chunks).toString()).error.code
              } catch {}
              codes.set(code, (codes.get(code) ?? 0) + 1)
            }
            else if (res.statusCode < 200 || res.statusCode > 299) {
              bad++
              lastBad = `${res.statusCode} ${Buffer.concat(chunks).toString().slice(0, 200)}`
            }
            resolve()
          })
        },
      )
      req.on('error', reject)
      req.end(body)
    })
  const worker = async () => {
    while (sent < count) {
      sent++
      // A connection the server closed under us (a keep-alive race) is retried once on a new one.
      await one().catch((err) => {
        resets++
        if (resets > 10) throw err
        return one()
      })
    }
  }
  return Promise.all(Array.from({ length: connections }, worker)).then(() => {
    agent.destroy()
    if (resets) line('  connections reset and retried', String(resets))
    if (unavailable) line('  answered 503 (not stored)', `${unavailable} of ${count} (${[...codes].map(([c, n]) => `${c} ×${n}`).join(', ')})`)
    if (bad) throw new Error(`${bad} of ${count} answers were not 2xx (last: ${lastBad})`)
  })
}
