// How many CPUs `server.workers: auto` may use. Node's availableParallelism() counts the cores the
// process may run on, but not the CPU quota of its cgroup (`docker run --cpus`, a Kubernetes CPU
// limit): a container limited to 1 CPU on a 64-core host would fork 64 workers, each with its own
// memory, on a budget one of them could use up.
import { readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'

/**
 * The CPU quota of this process's cgroup or any cgroup above it (the smallest), in CPUs, possibly
 * fractional; undefined when there is none (or no cgroup file system: not Linux). Reads cgroup v2's
 * `cpu.max` and v1's `cpu.cfs_quota_us` / `cpu.cfs_period_us`. `root` is for tests.
 */
export function cgroupCpuQuota(root = '/'): number | undefined {
  let lines: string[]
  try {
    lines = readFileSync(join(root, 'proc/self/cgroup'), 'utf8').split('\n')
  } catch {
    return undefined
  }
  let quota: number | undefined
  for (const line of lines) {
    const m = /^\d+:([^:]*):(\/.*)$/.exec(line.trim())
    if (!m) continue
    const v2 = m[1] === ''
    if (!v2 && !m[1].split(',').includes('cpu')) continue
    const base = join(root, 'sys/fs/cgroup', v2 ? '' : 'cpu')
    // Up to the root of the mount: in a container without its own cgroup namespace the path is the
    // host's, absent from the container's mount, whose root is the container's own cgroup.
    for (let dir = m[2]; ; dir = dirname(dir)) {
      const q = v2 ? readV2(join(base, dir)) : readV1(join(base, dir))
      if (q !== undefined && (quota === undefined || q < quota)) quota = q
      if (dir === '/') break
    }
  }
  return quota
}

/** `cpu.max`: "<quota> <period>" in µs, or "max <period>" without a quota. */
function readV2(dir: string): number | undefined {
  const [q, p] = readText(join(dir, 'cpu.max'))?.split(/\s+/) ?? []
  return ratio(q, p)
}

/** `cpu.cfs_quota_us` (-1 without a quota) over `cpu.cfs_period_us`. */
function readV1(dir: string): number | undefined {
  return ratio(readText(join(dir, 'cpu.cfs_quota_us')), readText(join(dir, 'cpu.cfs_period_us')))
}

function ratio(quota: string | undefined, period: string | undefined): number | undefined {
  const q = Number(quota)
  const p = Number(period)
  return quota && period && Number.isFinite(q) && q > 0 && p > 0 ? q / p : undefined
}

function readText(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8').trim()
  } catch {
    return undefined
  }
}
