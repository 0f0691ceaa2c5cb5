import { connect } from 'node:net'

/**
 * Sends a write whose headers arrive first and whose body arrives after `meanwhile` has run,
 * as a slow client's would: the handler has found the resource and waits for the body.
 */
export async function slowWrite(url: string, key: string, method: string, body: string, meanwhile: () => Promise<void>): Promise<number> {
  const u = new URL(url)
  const socket = connect(Number(u.port), u.hostname)
  socket.write(
    `${method} ${u.pathname}${u.search} HTTP/1.1\r\nHost: ${u.host}\r\nx-api-key: ${key}\r\ncontent-type: application/json\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n`,
  )
  await new Promise((r) => setTimeout(r, 200))
  await meanwhile()
  let answer = ''
  socket.on('data', (chunk) => (answer += chunk))
  const ended = new Promise((r) => socket.on('close', r))
  socket.write(body)
  await ended
  return Number(answer.split(' ')[1])
}
