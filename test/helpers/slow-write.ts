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

/**
 * Sends the requests' headers, then all their bodies in one go: the handlers, each waiting for
 * its body, then run side by side, as requests from clients racing each other would. A request
 * without a body (a DELETE) is sent whole at that moment, its handler running on its headers.
 */
export async function together(reqs: { url: string; key: string; method: string; body: string }[]): Promise<{ status: number; body: any }[]> {
  const later = new Map<(typeof reqs)[number], string>()
  const sockets = reqs.map((r) => {
    const u = new URL(r.url)
    const socket = connect(Number(u.port), u.hostname)
    const head =
      `${r.method} ${u.pathname}${u.search} HTTP/1.1\r\nHost: ${u.host}\r\nx-api-key: ${r.key}\r\ncontent-type: application/json\r\n` +
      `content-length: ${Buffer.byteLength(r.body)}\r\nconnection: close\r\n\r\n`
    if (r.body !== '') socket.write(head)
    else later.set(r, head)
    let answer = ''
    socket.on('data', (chunk) => (answer += chunk))
    const ended = new Promise<string>((resolve) => socket.on('close', () => resolve(answer)))
    return { socket, ended }
  })
  await new Promise((r) => setTimeout(r, 200))
  reqs.forEach((r, i) => sockets[i].socket.write(later.get(r) ?? r.body))
  return Promise.all(
    sockets.map(async ({ ended }) => {
      const text = await ended
      const body = text.slice(text.indexOf('\r\n\r\n') + 4)
      return { status: Number(text.split(' ')[1]), body: body ? JSON.parse(body) : undefined }
    }),
  )
}
