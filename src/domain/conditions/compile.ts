import { Decimal } from '../pricing/money.js'
import type { Field, FieldCatalog, FieldType } from './fields.js'
import { ConditionError, parseCondition, type CompareOp, type Literal, type Node } from './parse.js'
import { compilePattern } from './pattern.js'

/** A compiled condition: a plain function of one item. */
export type Predicate<T = any> = (item: T) => boolean

/**
 * Parses, type-checks and compiles a condition once (at config load) into nested closures, so
 * evaluating it is a few function calls and never a parse. A value that is absent is unequal to
 * every literal: `==`, `in`, `=~` and the orderings are false for it, `!=`, `not in` and `!~`
 * true. Throws a ConditionError (with its column) for a syntax error, an unknown field, a type
 * mismatch (`model > 3`) or a bad regular expression (RE2 syntax: pattern.ts).
 */
export function compileCondition<T>(source: string, fields: FieldCatalog<T>): Predicate<T> {
  return compileNode(parseCondition(source), fields)
}

export function compileNode<T>(node: Node, fields: FieldCatalog<T>): Predicate<T> {
  switch (node.op) {
    case 'const': {
      const v = node.value
      return () => v
    }
    case 'not': {
      const p = compileNode(node.operand, fields)
      return (i) => !p(i)
    }
    case 'and': {
      const a = compileNode(node.left, fields)
      const b = compileNode(node.right, fields)
      return (i) => a(i) && b(i)
    }
    case 'or': {
      const a = compileNode(node.left, fields)
      const b = compileNode(node.right, fields)
      return (i) => a(i) || b(i)
    }
    case 'exists': {
      const get = field(fields, node.field, node.at).get
      return (i) => get(i) !== undefined
    }
    case 'match': {
      const f = field(fields, node.field, node.at)
      if (f.type !== 'string' && f.type !== 'any') throw new ConditionError(`${node.field} is a ${f.type}: =~ and !~ match strings`, node.at + 1)
      const test = compilePattern(node.pattern, f.lower === true, node.patternAt + 1)
      const get = f.get
      const matches = (i: T): boolean => {
        const v = get(i)
        return typeof v === 'string' && test(v)
      }
      return node.negated ? (i) => !matches(i) : matches
    }
    case 'in': {
      const f = field(fields, node.field, node.at)
      const tests = node.values.map((v, k) => equality(f, node.field, v, node.valuesAt[k]))
      const get = f.get
      let contains: Predicate<T>
      // Strings (the common case) are looked up in a set; other types compared one by one.
      if (f.type === 'string') {
        const set = new Set(node.values.map((v) => (f.lower ? (v as { value: string }).value.toLowerCase() : (v as { value: string }).value)))
        contains = (i) => {
          const v = get(i)
          return typeof v === 'string' && set.has(v)
        }
      } else {
        contains = (i) => {
          const v = get(i)
          if (v === undefined) return false
          for (const t of tests) if (t(v)) return true
          return false
        }
      }
      return node.negated ? (i) => !contains(i) : contains
    }
    case 'compare': {
      const f = field(fields, node.field, node.at)
      const get = f.get
      if (node.cmp === '==' || node.cmp === '!=') {
        const eq = equality(f, node.field, node.value, node.valueAt)
        return node.cmp === '==' ? (i) => { const v = get(i); return v !== undefined && eq(v) } : (i) => { const v = get(i); return v === undefined || !eq(v) }
      }
      const order = ordering(f, node.field, node.cmp, node.value, node.at, node.valueAt)
      return (i) => {
        const v = get(i)
        return v !== undefined && order(v)
      }
    }
  }
}

function field<T>(fields: FieldCatalog<T>, path: string, at: number): Field<T> {
  const f = fields.resolve(path)
  if ('error' in f) throw new ConditionError(f.error, at + 1)
  return f
}

const describe = (l: Literal): string => (l.type === 'string' ? `the string ${JSON.stringify(l.value)}` : l.type === 'number' ? `the number ${l.text}` : `${l.value}`)

function mismatch(path: string, type: FieldType, l: Literal, at: number): never {
  throw new ConditionError(`${path} is a ${type}, it cannot equal ${describe(l)}`, at + 1)
}

/** A test of a present value against one literal, type-checked against the field. */
function equality(f: Field, path: string, l: Literal, at: number): (v: unknown) => boolean {
  switch (f.type) {
    case 'string': {
      if (l.type !== 'string') mismatch(path, f.type, l, at)
      const s = f.lower ? (l as { value: string }).value.toLowerCase() : (l as { value: string }).value
      return (v) => v === s
    }
    case 'boolean': {
      if (l.type !== 'boolean') mismatch(path, f.type, l, at)
      const b = (l as { value: boolean }).value
      return (v) => v === b
    }
    case 'number': {
      if (l.type !== 'number') mismatch(path, f.type, l, at)
      const n = Number((l as { text: string }).text)
      return (v) => v === n
    }
    case 'decimal': {
      if (l.type !== 'number') mismatch(path, f.type, l, at)
      const d = literal(new Decimal((l as { text: string }).text))
      return (v) => compareToLiteral(v, d) === 0
    }
    case 'any':
      if (l.type === 'string') return (v) => v === l.value
      if (l.type === 'boolean') return (v) => v === l.value
      return numberEquals(new Decimal(l.text))
  }
}

/** A free-form value equal to a number literal: a JSON number of that value, or a decimal string of it (OTLP's big intValues). */
function numberEquals(d: Decimal): (v: unknown) => boolean {
  const n = d.toNumber()
  const parts = literal(d)
  return (v) => (typeof v === 'number' ? v === n && d.eq(v) : typeof v === 'string' && compareToLiteral(v, parts) === 0)
}

function ordering(f: Field, path: string, cmp: CompareOp, l: Literal, fieldAt: number, at: number): (v: unknown) => boolean {
  if (f.type === 'string' || f.type === 'boolean') throw new ConditionError(`${path} is a ${f.type}: ${cmp} compares numbers`, fieldAt + 1)
  if (l.type !== 'number') throw new ConditionError(`${cmp} compares numbers, not ${describe(l)}`, at + 1)
  const test = sign(cmp)
  if (f.type === 'number') {
    const n = Number(l.text)
    switch (cmp) {
      case '<': return (v) => typeof v === 'number' && v < n
      case '<=': return (v) => typeof v === 'number' && v <= n
      case '>': return (v) => typeof v === 'number' && v > n
      default: return (v) => typeof v === 'number' && v >= n
    }
  }
  const d = new Decimal(l.text)
  const parts = literal(d)
  if (f.type === 'decimal') return (v) => test(compareToLiteral(v, parts))
  // any: a JSON number or a decimal string orders; anything else is not comparable (false).
  return (v) => test(typeof v === 'number' ? (Number.isFinite(v) ? new Decimal(v).cmp(d) : NaN) : compareToLiteral(v, parts))
}

function sign(cmp: CompareOp): (c: number) => boolean {
  switch (cmp) {
    case '<': return (c) => c < 0
    case '<=': return (c) => c <= 0
    case '>': return (c) => c > 0
    case '>=': return (c) => c >= 0
    case '==': return (c) => c === 0
    default: return (c) => c !== 0
  }
}

/** A decimal as sign, integer digits (no leading zeros) and fraction digits (no trailing zeros). */
interface Parts {
  neg: boolean
  int: string
  frac: string
}

/** The parts of a plain decimal string (`-12.340`), or undefined for anything else. */
function partsOf(v: string): Parts | undefined {
  const n = v.length
  let i = 0
  const neg = n > 0 && v.charCodeAt(0) === 45
  if (neg) i++
  const intStart = i
  while (i < n && isDigit(v.charCodeAt(i))) i++
  const intEnd = i
  if (intEnd === intStart) return undefined
  let fracEnd = i
  if (i < n) {
    if (v.charCodeAt(i) !== 46) return undefined
    i++
    const fracStart = i
    while (i < n && isDigit(v.charCodeAt(i))) i++
    if (i !== n || i === fracStart) return undefined
    fracEnd = n
    while (fracEnd > fracStart && v.charCodeAt(fracEnd - 1) === 48) fracEnd--
  }
  let s = intStart
  while (s < intEnd - 1 && v.charCodeAt(s) === 48) s++
  const int = v.slice(s, intEnd)
  const frac = fracEnd > intEnd + 1 ? v.slice(intEnd + 1, fracEnd) : ''
  // -0 is 0.
  return { neg: neg && !(int === '0' && frac === ''), int, frac }
}

const isDigit = (c: number): boolean => c >= 48 && c <= 57

/** The order of two non-negative decimals given as parts. */
function compareMagnitude(a: Parts, b: Parts): number {
  if (a.int.length !== b.int.length) return a.int.length < b.int.length ? -1 : 1
  if (a.int !== b.int) return a.int < b.int ? -1 : 1
  // Same integer part: the fractions compare as digit strings (no trailing zeros on either side).
  return a.frac === b.frac ? 0 : a.frac < b.frac ? -1 : 1
}

/**
 * The order of a decimal string (money, a nanosecond time) against d, exactly and without
 * building a Decimal per record (that costs microseconds); NaN when v is no plain decimal string.
 */
export function compareDecimal(v: unknown, d: Decimal): number {
  return compareToLiteral(v, literal(d))
}

/** A literal's parts, made once when a condition is compiled. */
const literal = (d: Decimal): Parts => partsOf(d.toFixed())!

function compareToLiteral(v: unknown, b: Parts): number {
  if (typeof v !== 'string') return NaN
  const a = partsOf(v)
  if (!a) return NaN
  if (a.neg !== b.neg) return a.neg ? -1 : 1
  const c = compareMagnitude(a, b)
  return a.neg ? -c : c
}
