// `import { Service, resolveConfig, FACTORIES } from 'meterd/daemon'`: the daemon, for embedding
// it in another process. Loads every component (LMDB, gRPC, …); `import 'meterd'` does not.
export { Service } from './core/service.js'
export { resolveConfig } from './core/config/resolve.js'
export { FACTORIES } from './components.js'
export { factoryMap } from './core/graph.js'
