// `npm start` and `npm test` build through scripts/build.js --if-stale: tsc runs only when a
// source changed since the last build. Checked on a small project laid out like meterd's.
import { spawnSync } from 'node:child_process'
import { copyFileSync, existsSync, mkdirSync, readFileSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { PACKAGE_ROOT } from '../../src/core/paths.js'
import { removeDir, tempDir } from '../helpers/meterd.js'

t.test('npm scripts: prepare builds once, start and test rebuild only what changed', async (t) => {
  const pkg = JSON.parse(readFileSync(join(PACKAGE_ROOT, 'package.json'), 'utf8'))
  t.equal(pkg.scripts.prepare, 'node scripts/build.js --if-stale', 'npm ci builds through prepare')
  t.equal(pkg.scripts.prestart, 'node scripts/build.js --if-stale', 'npm start builds only when stale')
  t.equal(pkg.scripts.pretest, 'node scripts/build.js --if-stale', 'npm test builds only when stale')
  t.match(readFileSync(join(PACKAGE_ROOT, 'README.md'), 'utf8'), 'npm ci && npm start', "the README's first command is unchanged")
})

t.test('build.js --if-stale runs tsc only when a source is newer than the last build', async (t) => {
  const root = tempDir('meterd-build-')
  t.teardown(() => removeDir(root))
  mkdirSync(join(root, 'scripts'))
  mkdirSync(join(root, 'src', 'cli'), { recursive: true })
  for (const script of ['build.js', 'price-books.js']) copyFileSync(join(PACKAGE_ROOT, 'scripts', script), join(root, 'scripts', script))
  symlinkSync(join(PACKAGE_ROOT, 'node_modules'), join(root, 'node_modules'))
  writeFileSync(join(root, 'package.json'), JSON.stringify({ type: 'module' }))
  writeFileSync(join(root, 'tsconfig.json'), JSON.stringify({ compilerOptions: { module: 'NodeNext', target: 'ES2022', outDir: 'dist', rootDir: '.' }, include: ['src/**/*.ts'] }))
  const main = join(root, 'src', 'cli', 'main.ts')
  writeFileSync(main, 'export const answer: number = 1\n')
  const out = join(root, 'dist', 'src', 'cli', 'main.js')
  const build = () => spawnSync(process.execPath, [join(root, 'scripts', 'build.js'), '--if-stale'], { cwd: root, encoding: 'utf8', timeout: 120_000 })

  t.equal(build().status, 0, 'the first build compiles')
  t.match(readFileSync(out, 'utf8'), 'answer = 1')
  // Move the output into the past: a rebuild would give it a new time.
  // Whole seconds, so the time read back is the time written.
  const now = Math.floor(Date.now() / 1000) * 1000
  const past = new Date(now - 3_600_000)
  const older = new Date(now - 7_200_000)
  utimesSync(out, past, past)
  utimesSync(main, older, older)
  utimesSync(join(root, 'src', 'cli'), older, older)
  utimesSync(join(root, 'src'), older, older)
  utimesSync(join(root, 'tsconfig.json'), older, older)
  utimesSync(join(root, 'package.json'), older, older)
  t.equal(build().status, 0)
  t.equal(Math.round(statSync(out).mtimeMs), past.getTime(), 'nothing changed: tsc did not run')

  writeFileSync(main, 'export const answer: number = 2\n')
  t.equal(build().status, 0)
  t.match(readFileSync(out, 'utf8'), 'answer = 2', 'a changed source is rebuilt')

  removeDir(join(root, 'src'))
  t.equal(build().status, 0, 'without sources (an installed package) there is nothing to build')
  t.ok(existsSync(out))
})
