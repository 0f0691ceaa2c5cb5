// `import { Service, resolveConfig, FACTORIES } from 'meterd/daemon'`: the daemon, for embedding
// it in another process. Loads every component (LMDB, gRPC, …); `import 'meterd'` does not.
export { Service } from './host/service.js'
export { resolveConfig } from './host/resolve.js'
export { FACTORIES } from './components.js'
export { factoryMap } from './host/graph.js'
