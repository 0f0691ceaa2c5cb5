import { performance, type EventLoopUtilization } from 'node:perf_hooks'
import { getHeapStatistics, setFlagsFromString } from 'node:v8'

/** How often the window looks at the event loop and the heap. */
const POLL_MS = 500
/** The window closes by then even if V8 has not reduced the heap (its first check comes 8 s after start-up's last full GC). */
const WINDOW_MS = 30_000
/** A share of the event loop above this in one poll is work, not the tail of start-up (0.04–0.1 on the 2-core VM). */
const BUSY = 0.25

/**
 * Lets V8 return start-up's memory while the daemon waits for its first work.
 *
 * Loading and wiring the components grows V8's young generation to its maximum (two 16 MiB
 * semi-spaces, about 14 MiB of them resident) and nothing shrinks it but V8's memory reducer.
 * The reducer looks 8 s after start-up's last full GC, but judges the allocation rate by an
 * average that still holds start-up, so it finds the rate high and waits 8 s more, again and
 * again: on the 2-core VM it ran 30–40 s after start, and an idle daemon sat at 88–90 MiB
 * instead of 72 until then (docs/performance.md, idle RSS 2026-11-29).
 *
 * So once the event loop has been idle for a poll after start, V8 is told to favour memory
 * (`--optimize-for-size`, which the reducer reads when it looks) until the heap has shrunk, the
 * first sign of work, or WINDOW_MS after start. A daemon loaded from the start (the
 * cpu-per-request bench) never opens the window. Nothing on the request path changes: under
 * load the young generation grows back as it does after the reducer's own run.
 */
export function returnStartupMemoryWhileIdle(): void {
  const began = Date.now()
  let heapWhenOpened = 0 // 0: the window is not open (yet)
  let last: EventLoopUtilization = performance.eventLoopUtilization()
  const timer = setInterval(() => {
    const now = performance.eventLoopUtilization()
    const busy = performance.eventLoopUtilization(now, last).utilization > BUSY
    last = now
    const heap = getHeapStatistics().total_heap_size
    if (!busy && heapWhenOpened === 0) {
      heapWhenOpened = heap
      setFlagsFromString('--optimize-for-size')
    } else if (busy || heap < heapWhenOpened * 0.6 || Date.now() - began >= WINDOW_MS) {
      clearInterval(timer)
      if (heapWhenOpened > 0) setFlagsFromString('--no-optimize-for-size')
    }
  }, POLL_MS)
  timer.unref()
}
