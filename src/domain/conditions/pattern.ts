import { RE2JS, RE2JSSyntaxException } from 're2js'
import { ConditionError } from './parse.js'

/**
 * Compiles the pattern of `=~` / `!~` to a test of a string. The subject is the client's (a model
 * name, a user id), so matching runs on RE2 (re2js, pure JS), in time linear in the subject
 * whatever the pattern: a backtracking engine (JavaScript's RegExp) takes exponential time on
 * `(a+)+$` against `aaaa…!`, and the event loop, so every request of every client, would wait.
 * Constructs that need backtracking (backreferences, lookaround) are refused here, at config load.
 * `column` is where the pattern's string literal starts.
 */
export function compilePattern(pattern: string, caseInsensitive: boolean, column: number): (s: string) => boolean {
  let re: RE2JS
  try {
    re = RE2JS.compile(pattern, caseInsensitive ? RE2JS.CASE_INSENSITIVE : 0)
  } catch (err) {
    throw new ConditionError(`bad regular expression: ${reason(err as Error)}`, column)
  }
  return (s) => re.test(s)
}

const NOT_LINEAR = 'conditions use RE2 syntax, which leaves out what cannot be matched in linear time (docs/routing.md)'

function reason(err: Error): string {
  if (!(err instanceof RE2JSSyntaxException)) return err.message
  const what = err.getDescription()
  const at = err.getPattern() ?? ''
  // RE2 reports these as a bad escape or bad group syntax; say what the operator wrote instead.
  if (/^\\[1-9k]/.test(at)) return `backreferences (${at}) are not supported: ${NOT_LINEAR}`
  const look = /^\(\?<?[=!]/.exec(at)
  if (look) return `lookahead and lookbehind (${look[0]}) are not supported: ${NOT_LINEAR}`
  return at ? `${what}: \`${at}\`` : what
}
