import { createServer } from 'node:http'
import { readFileSync } from 'node:fs'
import { parseArgs } from 'node:util'
import { verifyWebhook, WebhookDeduplicator, DEFAULT_TOLERANCE_SECONDS } from '../domain/webhooks/verify.js'

export const WEBHOOK_USAGE = `  webhook verify --secret S [--secret S2] --headers h.txt --body b.bin [--tolerance SEC] [--now EPOCH_S] [--vendor-word W]
  webhook listen --port P --secret S [--secret S2] [--host 127.0.0.1] [--vendor-word W]`

class UsageError extends Error {
  exitCode = 64
}

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

/** `meterd webhook verify|listen`: the receiving side, for customers testing their endpoint. */
export async function webhookCommand(args: string[]): Promise<number> {
  const [sub, ...rest] = args
  let parsed
  try {
    parsed = parseArgs({
      args: rest,
      options: {
        secret: { type: 'string', multiple: true },
        headers: { type: 'string' },
        body: { type: 'string' },
        tolerance: { type: 'string' },
        now: { type: 'string' },
        'vendor-word': { type: 'string' },
        port: { type: 'string' },
        host: { type: 'string' },
      },
    })
  } catch (err) {
    throw new UsageError(`${(err as Error).message}\nusage:\n${WEBHOOK_USAGE}`)
  }
  const v = parsed.values
  const secrets = v.secret ?? []
  if (secrets.length === 0) throw new UsageError(`webhook ${sub ?? ''}: --secret is required\nusage:\n${WEBHOOK_USAGE}`)
  const vendorWord = v['vendor-word'] ?? 'Service'
  const toleranceSeconds = v.tolerance !== undefined ? Number(v.tolerance) : DEFAULT_TOLERANCE_SECONDS

  switch (sub) {
    case 'verify': {
      if (!v.headers || !v.body) throw new UsageError(`webhook verify needs --headers FILE and --body FILE\nusage:\n${WEBHOOK_USAGE}`)
      const headers = parseHeaderFile(readFileSync(v.headers, 'utf8'))
      const body = readFileSync(v.body)
      const now = v.now !== undefined ? Number(v.now) * 1000 : undefined
      const r = verifyWebhook(body, headers, { secrets, toleranceSeconds, now, vendorWord })
      if (r.ok) {
        process.stdout.write(`valid: signature matches, timestamp ${r.timestamp}${r.eventId ? `, event ${r.eventId}` : ''}\n`)
        return 0
      }
      process.stdout.write(`INVALID: ${r.reason}: ${r.message}\n`)
      return 1
    }
    case 'listen': {
      const port = Number(v.port ?? '')
      if (!Number.isInteger(port) || port < 0 || port > 65535) throw new UsageError('webhook listen needs --port P')
      const host = v.host ?? '127.0.0.1'
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
        server.once('error', reject)
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
    }
    default:
      throw new UsageError(`webhook: unknown subcommand "${sub ?? ''}"\nusage:\n${WEBHOOK_USAGE}`)
  }
}
