/**
 * The workers' direct channels (src/core/cluster/peers.ts): what one worker publishes reaches
 * every other worker up at the time, once and in order, whichever of them started first, and a
 * worker that replaces a dead one is reached as soon as its open() has resolved.
 */
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { PeerMesh } from '../../src/core/cluster/peers.js'

type Heard = { topic: string; data: unknown }[]

function worker(dir: string, index: number): { mesh: PeerMesh; heard: Heard; warnings: string[]; gone: { peer: number; heardBefore: number }[]; rejoined: number[] } {
  const heard: Heard = []
  const warnings: string[] = []
  const gone: { peer: number; heardBefore: number }[] = []
  const rejoined: number[] = []
  const mesh = new PeerMesh(
    dir,
    index,
    (topic, data) => heard.push({ topic, data }),
    (m) => warnings.push(m),
    (peer) => gone.push({ peer, heardBefore: heard.length }),
    (peer) => rejoined.push(peer),
  )
  return { mesh, heard, warnings, gone, rejoined }
}

/** Workers of these indexes in a fresh directory, closed and removed when `t` ends. */
function workersIn(t: { teardown(fn: () => void): void }, ...indexes: number[]): { dir: string; w: ReturnType<typeof worker>[] } {
  const dir = mkdtempSync(join(tmpdir(), 'meterd-peers-test-'))
  const w = indexes.map((i) => worker(dir, i))
  t.teardown(() => {
    for (const x of w) x.mesh.close()
    rmSync(dir, { recursive: true, force: true })
  })
  return { dir, w }
}

/** A socket file nothing listens on, as a worker killed with kill -9 leaves (bound by a process that is gone). */
function staleSocket(path: string): void {
  execFileSync('python3', ['-c', 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])', path])
}

/** Resolves once `cond` holds (checked every few ms), or fails after `ms`. */
async function until(cond: () => boolean, ms = 3000): Promise<void> {
  const end = Date.now() + ms
  while (!cond()) {
    if (Date.now() > end) throw new Error('timed out')
    await new Promise((r) => setTimeout(r, 5))
  }
}

t.test('three workers: each message reaches every other worker once, in order, strings and values alike', async (t) => {
  const { w } = workersIn(t, 0, 1, 2)
  // Started one after the other, as the supervisor does (the leader first).
  for (const x of w) await x.mesh.open()
  t.same(w.map((x) => x.mesh.peers), [2, 2, 2], 'every worker sends to the two others')

  const big = 'x'.repeat(3 << 20) // several socket reads: frames are reassembled
  w[1].mesh.send('rows', '[["é","a\\"b"],[1,2]]')
  w[1].mesh.send('kick', null)
  w[1].mesh.send('change', { key: 'k', n: 2, nested: [1, 'two'] })
  w[1].mesh.send('rows', big)
  w[2].mesh.send('kick', 'from 2')
  await until(() => w[0].heard.length === 5 && w[2].heard.length === 4 && w[1].heard.length === 1)
  // Order holds per sender: worker 2's message may come anywhere among worker 1's.
  const from1 = w[0].heard.filter((h) => h.data !== 'from 2')
  t.same(from1.map((h) => h.topic), ['rows', 'kick', 'change', 'rows'], 'in the order sent')
  t.equal(from1[0].data, '[["é","a\\"b"],[1,2]]', 'a string arrives as it was sent')
  t.equal(from1[1].data, null)
  t.same(from1[2].data, { key: 'k', n: 2, nested: [1, 'two'] }, 'a value arrives equal')
  t.equal(from1[3].data, big, 'a 3 MiB message arrives whole')
  t.same(w[2].heard.map((h) => h.topic), ['rows', 'kick', 'change', 'rows'], 'the third worker hears the same')
  t.same(w[1].heard, [{ topic: 'kick', data: 'from 2' }], 'a worker does not hear itself')
  await new Promise((r) => setTimeout(r, 50))
  t.equal(w[0].heard.length, 5, 'nothing arrives twice')
})

t.test('a worker that replaces a dead one is reached from the moment its open() resolves', async (t) => {
  const { dir, w } = workersIn(t, 0, 1)
  const [a] = w
  let [, b] = w
  await a.mesh.open()
  await b.mesh.open()
  // Worker 1 dies without a word (kill -9): its connections close, its socket file stays behind.
  // (Marked closed: a killed process does not join anyone again.)
  ;(b.mesh as unknown as { closed: boolean }).closed = true
  ;(b.mesh as unknown as { sockets: Set<import('node:net').Socket> }).sockets.forEach((s) => s.destroy())
  ;(b.mesh as unknown as { server: import('node:net').Server }).server.close()
  await until(() => a.mesh.peers === 0)
  staleSocket(join(dir, '1.sock'))
  a.mesh.send('rows', 'lost: nobody is there')

  b = worker(dir, 1)
  t.teardown(() => b.mesh.close())
  await b.mesh.open()
  a.mesh.send('rows', 'after the restart')
  await until(() => b.heard.length === 1)
  t.equal(b.heard[0].data, 'after the restart')
  b.mesh.send('kick', null)
  await until(() => a.heard.length === 1)
  t.equal(a.heard[0].topic, 'kick', 'and it reaches the others on the same connection')
  t.same([a.rejoined, b.rejoined], [[], []], 'a replacement is no rejoin')
})

t.test('a worker\'s end is told to each other worker once, after every message it sent', async (t) => {
  const { w } = workersIn(t, 0, 1, 2)
  for (const x of w) await x.mesh.open()
  // Worker 2 joined both others, so each pair holds two connections: the end is told when the last closes.
  const big = 'y'.repeat(2 << 20)
  w[1].mesh.send('rows', 'first')
  w[1].mesh.send('rows', big)
  // Killed (kill -9): its connections close with the last frames still on their way.
  ;(w[1].mesh as unknown as { closed: boolean }).closed = true
  ;(w[1].mesh as unknown as { sockets: Set<import('node:net').Socket> }).sockets.forEach((s) => s.end())
  ;(w[1].mesh as unknown as { server: import('node:net').Server }).server.close()
  await until(() => w[0].gone.length === 1 && w[2].gone.length === 1)
  for (const i of [0, 2]) {
    t.same(w[i].gone, [{ peer: 1, heardBefore: 2 }], `worker ${i} hears of worker 1's end once, after both its messages`)
  }
  // A worker that stops on its own (close) is gone for the others too; they are not gone for it.
  w[2].mesh.close()
  await until(() => w[0].gone.length === 2)
  t.same(w[0].gone[1].peer, 2)
  await new Promise((r) => setTimeout(r, 50))
  t.equal(w[2].gone.length, 1, 'a closed worker is told nothing of the others it leaves')
})

t.test('two workers starting together find each other; a socket of a dead worker is skipped', async (t) => {
  const { dir, w: [a, b] } = workersIn(t, 1, 2)
  staleSocket(join(dir, '5.sock'))
  t.ok(readdirSync(dir).includes('5.sock'))
  await Promise.all([a.mesh.open(), b.mesh.open()])
  await until(() => a.mesh.peers === 1 && b.mesh.peers === 1)
  a.mesh.send('kick', 1)
  b.mesh.send('kick', 2)
  await until(() => a.heard.length === 1 && b.heard.length === 1)
  t.same([a.heard[0].data, b.heard[0].data], [2, 1])
  await new Promise((r) => setTimeout(r, 50))
  t.same([a.heard.length, b.heard.length], [1, 1], 'once each, even if both connected to the other')
  // Worker 1 is killed: worker 2 (the higher index) tries to join it again, which its dead socket refuses.
  ;(a.mesh as unknown as { closed: boolean }).closed = true
  ;(a.mesh as unknown as { sockets: Set<import('node:net').Socket> }).sockets.forEach((s) => s.destroy())
  ;(a.mesh as unknown as { server: import('node:net').Server }).server.close()
  await until(() => b.gone.length === 1)
  await new Promise((r) => setTimeout(r, 100))
  t.same(b.gone.map((g) => g.peer), [1], 'its end is told once')
  t.same(b.rejoined, [], 'a death is no rejoin')
  t.equal(b.mesh.peers, 0)
})

/** Worker `slow` reads nothing more (hung) while `fast` sends to it until it is dropped. */
async function hangUntilDropped(fast: ReturnType<typeof worker>, slow: ReturnType<typeof worker>): Promise<import('node:net').Socket[]> {
  const paused = [...(slow.mesh as unknown as { sockets: Set<import('node:net').Socket> }).sockets]
  for (const s of paused) s.pause()
  const chunk = 'y'.repeat(8 << 20)
  for (let i = 0; i < 16 && fast.mesh.peers > 0; i++) {
    fast.mesh.send('rows', chunk)
    await new Promise((r) => setImmediate(r))
  }
  await until(() => fast.mesh.peers === 0)
  return paused
}

/** After a drop: both send to each other again, once each, and each was told the other is back (what was sent between is lost). */
async function assertRejoined(t: Test, a: ReturnType<typeof worker>, b: ReturnType<typeof worker>): Promise<void> {
  await until(() => a.rejoined.length === 1 && b.rejoined.length === 1 && a.mesh.peers === 1 && b.mesh.peers === 1)
  t.same([a.rejoined, b.rejoined], [[1], [0]], 'each is told once that the other is back')
  const [ha, hb] = [a.heard.length, b.heard.length]
  a.mesh.send('kick', 'from 0')
  b.mesh.send('kick', 'from 1')
  await until(() => a.heard.length > ha && b.heard.length > hb)
  await new Promise((r) => setTimeout(r, 50))
  t.same(a.heard.slice(ha), [{ topic: 'kick', data: 'from 1' }], 'worker 0 hears worker 1 again, once')
  t.same(b.heard.slice(hb).filter((h) => h.topic === 'kick'), [{ topic: 'kick', data: 'from 0' }], 'worker 1 hears worker 0 again, once')
}

t.test('a worker that stops reading is dropped, not buffered for without bound, and joined again once it reads', async (t) => {
  const { w: [a, b] } = workersIn(t, 0, 1)
  await a.mesh.open()
  await b.mesh.open()
  // Worker 1 hangs: it reads nothing more.
  const paused = await hangUntilDropped(a, b)
  t.match(a.warnings.join('\n'), /worker 1 does not read/)
  t.same(b.gone, [], 'the hung worker has not seen the end yet')
  // It reads again: it sees the end, and (the higher index) joins worker 0 again.
  for (const s of paused) s.resume()
  await assertRejoined(t, a, b)
  t.same([a.gone.map((g) => g.peer), b.gone.map((g) => g.peer)], [[1], [0]], 'each was told of the end before')
})

t.test('a worker dropped by a higher index is joined again by it once it reads', async (t) => {
  const { w: [a, b] } = workersIn(t, 0, 1)
  await a.mesh.open()
  await b.mesh.open()
  // Worker 0 hangs; worker 1 drops it and joins it again at once, which worker 0 answers when it reads.
  const paused = await hangUntilDropped(b, a)
  await new Promise((r) => setTimeout(r, 50))
  for (const s of paused) s.resume()
  await assertRejoined(t, a, b)
})
