/**
 * Strings interned as small integers, so columns hold 4-byte codes instead of strings and
 * filters and groupings compare integers. Code 0 is always the empty string: "not given".
 */
export class Dictionary {
  private readonly codes = new Map<string, number>([['', 0]])
  readonly values: string[] = ['']

  code(value: string): number {
    let c = this.codes.get(value)
    if (c === undefined) {
      c = this.values.length
      this.codes.set(value, c)
      this.values.push(value)
    }
    return c
  }

  /** The code of a value already seen, or -1. */
  find(value: string): number {
    return this.codes.get(value) ?? -1
  }

  get size(): number {
    return this.values.length
  }
}
