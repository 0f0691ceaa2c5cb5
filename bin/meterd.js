#!/usr/bin/env node
// Thin launcher: the daemon runs from the compiled output (`npm run build`).
import('../dist/src/cli/main.js').then((m) => m.main(process.argv.slice(2)))
