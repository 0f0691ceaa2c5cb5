/**
 * Runs the functions given for one key one after another, each once the one before it has
 * settled: a resource's read → merge → write steps in one process never interleave with
 * another request's, so no change answered 200 is overwritten by a copy read before it.
 */
export class KeyedSerial {
  private readonly tails = new Map<string, Promise<void>>()

  run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const result = (this.tails.get(key) ?? Promise.resolve()).then(fn)
    const tail = result.then(
      () => undefined,
      () => undefined,
    )
    this.tails.set(key, tail)
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key)
    })
    return result
  }
}
