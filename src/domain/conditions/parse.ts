/**
 * The condition language shared by the routing connector and the filter processor
 * (docs/routing.md): a hand-written tokenizer and a recursive-descent parser, so a config
 * string is never evaluated as code. Precedence, loosest first: `or`, `and`, `not`, then a
 * comparison or a parenthesised condition.
 *
 *   condition  := and ('or' and)*
 *   and        := unary ('and' unary)*
 *   unary      := 'not' unary | '(' condition ')' | 'true' | 'false' | comparison
 *   comparison := FIELD ( ('==' | '!=' | '<' | '<=' | '>' | '>=') literal
 *                       | 'not'? 'in' '[' literal (',' literal)* ']'
 *                       | ('=~' | '!~') STRING
 *                       | 'exists' )
 *   literal    := STRING | NUMBER | 'true' | 'false'
 */

export type CompareOp = '==' | '!=' | '<' | '<=' | '>' | '>='

/** A literal as written: strings and booleans as values, numbers as their decimal text (exact). */
export type Literal = { type: 'string'; value: string } | { type: 'number'; text: string } | { type: 'boolean'; value: boolean }

export type Node =
  | { op: 'or' | 'and'; left: Node; right: Node }
  | { op: 'not'; operand: Node }
  | { op: 'const'; value: boolean }
  | { op: 'compare'; cmp: CompareOp; field: string; at: number; value: Literal; valueAt: number }
  | { op: 'in'; field: string; at: number; values: Literal[]; valuesAt: number[]; negated: boolean }
  | { op: 'match'; field: string; at: number; pattern: string; patternAt: number; negated: boolean }
  | { op: 'exists'; field: string; at: number }

/** A condition that does not parse or does not type-check; `column` counts from 1. */
export class ConditionError extends Error {
  constructor(readonly reason: string, readonly column: number) {
    super(`column ${column}: ${reason}`)
  }
}

type TokenKind = 'field' | 'string' | 'number' | 'op' | 'punct' | 'keyword' | 'end'
interface Token {
  kind: TokenKind
  text: string
  /** The string's value, for `string` tokens. */
  value?: string
  /** Offset in the source, 0-based. */
  at: number
}

const KEYWORDS = new Set(['and', 'or', 'not', 'in', 'exists', 'true', 'false'])
const OPERATORS = ['==', '!=', '<=', '>=', '=~', '!~', '<', '>']
const NUMBER = /^-?(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][+-]?\d+)?/
// A field is a dotted path of names; a name may hold letters, digits, `_` and `-` (attribute keys do).
const FIELD = /^[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_][A-Za-z0-9_-]*)*/

function tokenize(src: string): Token[] {
  const out: Token[] = []
  let i = 0
  while (i < src.length) {
    const c = src[i]
    if (c === ' ' || c === '\t' || c === '\n' || c === '\r') {
      i++
      continue
    }
    if (c === '"' || c === "'") {
      const start = i
      let value = ''
      i++
      for (;;) {
        if (i >= src.length) throw new ConditionError(`unterminated string starting here`, start + 1)
        const d = src[i]
        if (d === c) break
        if (d === '\\') {
          const e = src[i + 1]
          const esc: Record<string, string> = { '"': '"', "'": "'", '\\': '\\', n: '\n', t: '\t', r: '\r' }
          if (e === undefined || !(e in esc)) throw new ConditionError(`unknown escape \\${e ?? ''} (use \\", \\', \\\\, \\n, \\t or \\r)`, i + 1)
          value += esc[e]
          i += 2
          continue
        }
        value += d
        i++
      }
      i++
      out.push({ kind: 'string', text: src.slice(start, i), value, at: start })
      continue
    }
    const num = (c === '-' || c === '.' || (c >= '0' && c <= '9')) && NUMBER.exec(src.slice(i))
    if (num) {
      out.push({ kind: 'number', text: num[0], at: i })
      i += num[0].length
      continue
    }
    const op = OPERATORS.find((o) => src.startsWith(o, i))
    if (op) {
      out.push({ kind: 'op', text: op, at: i })
      i += op.length
      continue
    }
    if (c === '(' || c === ')' || c === '[' || c === ']' || c === ',') {
      out.push({ kind: 'punct', text: c, at: i })
      i++
      continue
    }
    const field = FIELD.exec(src.slice(i))
    if (field) {
      const text = field[0]
      out.push({ kind: KEYWORDS.has(text) ? 'keyword' : 'field', text, at: i })
      i += text.length
      continue
    }
    if (c === '=') throw new ConditionError('unexpected "=" (compare with ==)', i + 1)
    if (c === '&' || c === '|') throw new ConditionError(`unexpected "${c}" (combine with and, or)`, i + 1)
    throw new ConditionError(`unexpected character "${c}"`, i + 1)
  }
  out.push({ kind: 'end', text: '', at: src.length })
  return out
}

/** Parses a condition into its tree; throws a ConditionError naming the column. */
export function parseCondition(src: string): Node {
  const tokens = tokenize(src)
  let pos = 0
  const peek = (): Token => tokens[pos]
  const next = (): Token => tokens[pos++]
  const is = (kind: TokenKind, text?: string): boolean => peek().kind === kind && (text === undefined || peek().text === text)
  const shown = (t: Token): string => (t.kind === 'end' ? 'the end' : `"${t.text}"`)
  const fail = (what: string, t: Token = peek()): never => {
    throw new ConditionError(`expected ${what}, found ${shown(t)}`, t.at + 1)
  }

  const literal = (): { value: Literal; at: number } => {
    const t = peek()
    if (t.kind === 'string') return next(), { value: { type: 'string', value: t.value! }, at: t.at }
    if (t.kind === 'number') return next(), { value: { type: 'number', text: t.text }, at: t.at }
    if (t.kind === 'keyword' && (t.text === 'true' || t.text === 'false')) return next(), { value: { type: 'boolean', value: t.text === 'true' }, at: t.at }
    return fail('a value (a "string", a number, true or false)')
  }

  const comparison = (): Node => {
    const f = peek()
    if (f.kind !== 'field') return fail('a field name, "not" or "("')
    next()
    const t = peek()
    if (t.kind === 'op') {
      next()
      if (t.text === '=~' || t.text === '!~') {
        const p = peek()
        if (p.kind !== 'string') return fail(`a "regular expression" after ${t.text}`)
        next()
        return { op: 'match', field: f.text, at: f.at, pattern: p.value!, patternAt: p.at, negated: t.text === '!~' }
      }
      const v = literal()
      return { op: 'compare', cmp: t.text as CompareOp, field: f.text, at: f.at, value: v.value, valueAt: v.at }
    }
    if (t.kind === 'keyword' && t.text === 'exists') {
      next()
      return { op: 'exists', field: f.text, at: f.at }
    }
    const negated = t.kind === 'keyword' && t.text === 'not' && tokens[pos + 1].kind === 'keyword' && tokens[pos + 1].text === 'in'
    if (negated) next()
    if (is('keyword', 'in')) {
      next()
      if (!is('punct', '[')) fail('"[" after in')
      next()
      const values: Literal[] = []
      const valuesAt: number[] = []
      for (;;) {
        const v = literal()
        values.push(v.value)
        valuesAt.push(v.at)
        if (is('punct', ',')) {
          next()
          continue
        }
        if (is('punct', ']')) break
        fail('"," or "]"')
      }
      next()
      return { op: 'in', field: f.text, at: f.at, values, valuesAt, negated }
    }
    return fail(`an operator after ${f.text} (==, !=, <, <=, >, >=, in, not in, =~, !~, exists)`)
  }

  const unary = (): Node => {
    if (is('keyword', 'not')) {
      next()
      return { op: 'not', operand: unary() }
    }
    if (is('punct', '(')) {
      next()
      const inner = or()
      if (!is('punct', ')')) fail('")"')
      next()
      return inner
    }
    if (is('keyword', 'true') || is('keyword', 'false')) return { op: 'const', value: next().text === 'true' }
    return comparison()
  }

  const and = (): Node => {
    let left = unary()
    while (is('keyword', 'and')) {
      next()
      left = { op: 'and', left, right: unary() }
    }
    return left
  }

  const or = (): Node => {
    let left = and()
    while (is('keyword', 'or')) {
      next()
      left = { op: 'or', left, right: and() }
    }
    return left
  }

  if (is('end')) throw new ConditionError('the condition is empty', 1)
  const tree = or()
  if (!is('end')) fail('"and", "or" or the end')
  return tree
}
