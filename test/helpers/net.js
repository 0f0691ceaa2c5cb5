// A free TCP port on 127.0.0.1 (plain JS, shared by the TypeScript tests and the JS benches).
import { createServer } from 'node:net'

/** @returns {Promise<number>} */
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => resolve(port))
    })
  })
}
