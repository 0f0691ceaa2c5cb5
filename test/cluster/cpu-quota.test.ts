/**
 * `server.workers: auto` in a container with a CPU limit: one worker per CPU of the limit (rounded
 * up), not one per core of the host, which Node's availableParallelism() reports. A 1-CPU
 * container on a 64-core host must not fork 64 workers.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { availableParallelism } from 'node:os'
import { dirname, join } from 'node:path'
import t from 'tap'
import { cgroupCpuQuota } from '../../src/core/cluster/cpus.js'
import { workerCount } from '../../src/core/cluster/supervisor.js'
import { removeDir, tempDir } from '../helpers/meterd.js'

/** A fake file system root holding the given files. */
function root(t: Tap.Test, files: Record<string, string>): string {
  const dir = tempDir('meterd-cgroup-')
  t.teardown(() => removeDir(dir))
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true })
    writeFileSync(join(dir, path), text)
  }
  return dir
}

t.test('cgroup v2: cpu.max of the process cgroup and its ancestors, the smallest wins', async (t) => {
  t.equal(cgroupCpuQuota(root(t, { 'proc/self/cgroup': '0::/\n', 'sys/fs/cgroup/cpu.max': '150000 100000\n' })), 1.5, 'a container (own cgroup namespace): 1.5 CPUs')
  t.equal(cgroupCpuQuota(root(t, { 'proc/self/cgroup': '0::/\n', 'sys/fs/cgroup/cpu.max': 'max 100000\n' })), undefined, '"max": no limit')
  t.equal(
    cgroupCpuQuota(root(t, { 'proc/self/cgroup': '0::/kubepods/pod1/c1\n', 'sys/fs/cgroup/kubepods/pod1/c1/cpu.max': 'max 100000', 'sys/fs/cgroup/kubepods/pod1/cpu.max': '50000 100000' })),
    0.5,
    'a limit on the pod above the container counts',
  )
  t.equal(cgroupCpuQuota(root(t, { 'proc/self/cgroup': '0::/docker/abc\n', 'sys/fs/cgroup/cpu.max': '200000 100000' })), 2, 'the host path absent from the mount: its root, the container cgroup, is read')
})

t.test('cgroup v1: cpu.cfs_quota_us over cpu.cfs_period_us', async (t) => {
  const files = { 'proc/self/cgroup': '4:cpu,cpuacct:/docker/abc\n3:memory:/docker/abc\n', 'sys/fs/cgroup/cpu/docker/abc/cpu.cfs_quota_us': '100000\n', 'sys/fs/cgroup/cpu/docker/abc/cpu.cfs_period_us': '100000\n' }
  t.equal(cgroupCpuQuota(root(t, files)), 1, '1 CPU')
  t.equal(cgroupCpuQuota(root(t, { ...files, 'sys/fs/cgroup/cpu/docker/abc/cpu.cfs_quota_us': '-1\n' })), undefined, '-1: no limit')
})

t.test('no cgroup file system (not Linux, or unreadable): no limit', async (t) => {
  t.equal(cgroupCpuQuota(root(t, {})), undefined)
})

t.test('auto is one worker per core, no more than the quota rounded up; a number is taken as given', async (t) => {
  const cores = availableParallelism()
  t.equal(workerCount('auto', undefined), Math.min(64, cores), 'no quota: one per core')
  t.equal(workerCount('auto', 0.5), 1, 'half a CPU: one worker')
  t.equal(workerCount('auto', 1), 1, 'one CPU: one worker, whatever the host has')
  t.equal(workerCount('auto', 1.5), Math.min(2, cores), '1.5 CPUs: two workers (when there are two cores)')
  t.equal(workerCount('auto', 1000), Math.min(64, cores), 'a quota above the cores: one per core')
  t.equal(workerCount(3, 1), 3, 'an explicit number is not cut')
})
