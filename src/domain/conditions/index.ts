export { compileCondition, compileNode, type Predicate } from './compile.js'
export { ConditionError, parseCondition, type Node, type Literal, type CompareOp } from './parse.js'
export { FIELD_CATALOGS, usageFields, spanFields, logFields, readPath, type Field, type FieldCatalog, type FieldType } from './fields.js'
export { conditionIssue } from './check.js'
