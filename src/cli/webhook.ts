import { createServer } from 'node:http'
import { readFileSync } from 'node:fs'
import { ExitError, UsageError, defineCommand, type Command } from './command.js'
import { listenFailure } from '../core/startup-error.js'
import { verifyWebhook, WebhookDeduplicator, DEFAULT_TOLERANCE_SECONDS } from '../domain/webhooks/verify.js'

/** `Name: value` lines (curl -D / raw HTTP); a status line and blank lines are skipped. */
export function parseHeaderFile(text: string): Record<string, string> {
  const out: Record<string, string> = {}
  for (const line of text.split(/\r?\n/)) {
    const i = line.indexOf(':')
    if (i <= 0 || /^HTTP\//i.test(line)) continue
    const name = line.slice(0, i).trim().toLowerCase()
    const value = line.slice(i + 1).trim()
    out[name] = out[name] ? `${out[name]}, ${value}` : value
  }
  return out
}

const SECRET = { type: 'string', multiple: true, required: true, arg: 'S', help: 'a signing secret (whsec_…); give two during a rotation (required)' } as const
const VENDOR_WORD = { type: 'string', arg: 'W', help: 'the word in the header names, X-W-Signature-256 (default Service)' } as const
const TOLERANCE = { type: 'string', arg: 'SEC', help: `accepted clock skew in seconds (default ${DEFAULT_TOLERANCE_SECONDS})` } as const

/** sysexits.h EX_NOINPUT: an input file did not exist or was not readable (not "the signature is invalid", exit 1). */
export const EX_NOINPUT = 66

/** A number of seconds from a flag; anything else is bad usage (NaN would reject every delivery as stale). */
function secondsOf(v: string | undefined, flag: string, fallback: number | undefined, c: Command): number | undefined {
  if (v === undefined) return fallback
  const n = Number(v)
  if (v.trim() === '' || !Number.isFinite(n) || n < 0) throw new UsageError(`${c.name}: ${flag} must be a number of seconds (≥ 0), not "${v}"`, c)
  return n
}

function readInput(path: string, flag: string): Buffer {
  try {
    return readFileSync(path)
  } catch (err) {
    throw new ExitError(`cannot read ${flag} ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, EX_NOINPUT)
  }
}

/** `meterd webhook verify`: checks one saved delivery, as a receiver would. */
const WEBHOOK_VERIFY: Command = defineCommand({
  name: 'webhook verify',
  summary: 'verify a saved webhook delivery (headers and raw body) against signing secrets',
  details: 'Exit status: 0 valid; 1 invalid (the reason is printed); 64 bad usage; 66 --headers or --body cannot be read.',
  options: {
    secret: SECRET,
    headers: { type: 'string', required: true, arg: 'FILE', help: 'the delivery\'s headers, `Name: value` lines as curl -D writes them (required)' },
    body: { type: 'string', required: true, arg: 'FILE', help: 'the raw body, byte for byte (required)' },
    tolerance: TOLERANCE,
    now: { type: 'string', arg: 'EPOCH_S', help: 'verify as if it were this time (seconds since the epoch)' },
    'vendor-word': VENDOR_WORD,
  },
  async run(v) {
    const secrets = v.secret ?? []
    if (secrets.length === 0) throw new UsageError('webhook verify needs --secret', WEBHOOK_VERIFY)
    if (!v.headers || !v.body) throw new UsageError('webhook verify needs --headers FILE and --body FILE', WEBHOOK_VERIFY)
    const toleranceSeconds = secondsOf(v.tolerance, '--tolerance', DEFAULT_TOLERANCE_SECONDS, WEBHOOK_VERIFY)!
    const nowS = secondsOf(v.now, '--now', undefined, WEBHOOK_VERIFY)
    const headers = parseHeaderFile(readInput(v.headers, '--headers').toString('utf8'))
    const body = readInput(v.body, '--body')
    const now = nowS !== undefined ? nowS * 1000 : undefined
    const r = verifyWebhook(body, headers, { secrets, toleranceSeconds, now, vendorWord: v['vendor-word'] ?? 'Service' })
    if (r.ok) {
      process.stdout.write(`valid: signature matches, timestamp ${r.timestamp}${r.eventId ? `, event ${r.eventId}` : ''}\n`)
      return 0
    }
    process.stdout.write(`INVALID: ${r.reason}: ${r.message}\n`)
    return 1
  },
})

/** `meterd webhook listen`: a receiving endpoint for customers testing their setup. */
const WEBHOOK_LISTEN: Command = defineCommand({
  name: 'webhook listen',
  summary: 'run a local webhook receiver that verifies every delivery and prints it as a JSON line',
  options: {
    port: { type: 'string', required: true, arg: 'P', help: 'the port to listen on (required; 0 for any)' },
    host: { type: 'string', arg: 'HOST', help: 'the address to listen on (default 127.0.0.1)' },
    secret: SECRET,
    tolerance: TOLERANCE,
    'vendor-word': VENDOR_WORD,
  },
  async run(v) {
    const secrets = v.secret ?? []
    if (secrets.length === 0) throw new UsageError('webhook listen needs --secret', WEBHOOK_LISTEN)
    const port = Number(v.port ?? '')
    if (v.port === undefined || !Number.isInteger(port) || port < 0 || port > 65535) throw new UsageError('webhook listen needs --port P', WEBHOOK_LISTEN)
    const host = v.host ?? '127.0.0.1'
    const toleranceSeconds = secondsOf(v.tolerance, '--tolerance', DEFAULT_TOLERANCE_SECONDS, WEBHOOK_LISTEN)!
    const vendorWord = v['vendor-word'] ?? 'Service'
    const dedup = new WebhookDeduplicator()
    const server = createServer((req, res) => {
      const chunks: Buffer[] = []
      req.on('data', (c: Buffer) => chunks.push(c))
      req.on('end', () => {
        const body = Buffer.concat(chunks)
        // Verify on the raw bytes before anything else (SPEC Receiver rules 1 and 6).
        const r = verifyWebhook(body, req.headers, { secrets, toleranceSeconds, vendorWord })
        let event: { id?: string; type?: string } = {}
        try {
          event = JSON.parse(body.toString('utf8'))
        } catch {}
        if (!r.ok) {
          process.stdout.write(JSON.stringify({ verdict: 'rejected', reason: r.reason, message: r.message, path: req.url }) + '\n')
          res.writeHead(401, { 'content-type': 'application/json' }).end(JSON.stringify({ error: r.reason }))
          return
        }
        const key = WebhookDeduplicator.keyOf({ eventId: event.id ?? r.eventId, timestamp: r.timestamp, rawBody: body })
        const first = dedup.firstSeen(key)
        process.stdout.write(JSON.stringify({ verdict: first ? 'verified' : 'duplicate', eventId: event.id, type: event.type, timestamp: r.timestamp, body: event }) + '\n')
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"received":true}')
      })
    })
    await new Promise<void>((resolve, reject) => {
      // A port in use or a host that does not resolve: one line and exit 78, as for meterd run.
      server.once('error', (err) => reject(listenFailure(err, `${host}:${port}`, '--host/--port', 'an address or a name that resolves (--host 127.0.0.1) and a port (--port 8080)')))
      server.listen(port, host, () => resolve())
    })
    const addr = server.address() as { port: number }
    process.stdout.write(`listening on http://${host}:${addr.port}/ — verifying with ${secrets.length} secret(s); Ctrl-C to stop\n`)
    await new Promise<void>((resolve) => {
      process.once('SIGINT', resolve)
      process.once('SIGTERM', resolve)
    })
    server.close()
    return 0
  },
})

export const WEBHOOK_COMMANDS: Command[] = [WEBHOOK_VERIFY, WEBHOOK_LISTEN]
