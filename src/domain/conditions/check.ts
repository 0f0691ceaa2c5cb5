import type { ConfigIssue } from '../../core/config/schema.js'
import { compileCondition } from './compile.js'
import { FIELD_CATALOGS } from './fields.js'
import { ConditionError } from './parse.js'

/**
 * What is wrong with a condition in the config, for every signal its component is used with (a
 * component used nowhere is checked as usage), as one issue at `path`; undefined when it compiles.
 */
export function conditionIssue(source: string, signals: readonly string[], path: string): ConfigIssue | undefined {
  const list = signals.length ? signals : ['usage']
  for (const s of list) {
    const catalog = FIELD_CATALOGS[s]
    if (!catalog) return { path, message: `conditions cannot read ${s} items` }
    try {
      compileCondition(source, catalog)
    } catch (err) {
      if (!(err instanceof ConditionError)) throw err
      return { path, message: `${err.message}${list.length > 1 ? ` (in the ${s} pipelines)` : ''}` }
    }
  }
  return undefined
}
