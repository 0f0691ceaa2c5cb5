// The tools extension as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type, type Static } from '@sinclair/typebox'
import type { Descriptor, ExtensionFactory } from '../../host/component.js'
import type { DeclaredTool } from '../../domain/tools/registry.js'
import { parseToolSpec } from '../../domain/tools/tool.js'
import type { ApiError } from '../../core/errors.js'

const Price = Type.Union([Type.Number({ minimum: 0 }), Type.String({ pattern: '^\\d+(\\.\\d+)?$' })], { description: 'USD per unit, at most 1000000000 (a number or a decimal string)' })

// Declared tools are checked again at start by the same validator as the API (field paths included).
const DeclaredToolSchema = Type.Object(
  {
    team: Type.String({ default: '*', description: "The team the tool belongs to; '*' (default) for every team" }),
    toolId: Type.String({ pattern: '^[A-Za-z0-9_-]+$' }),
    name: Type.String(),
    toolType: Type.String({ description: 'SDK, MCP_SERVER, AI_SERVICE, REST_API, LOCAL_FUNCTION, CUSTOM (also MULTIMODAL, TOOL_CALL)' }),
    description: Type.Optional(Type.String()),
    toolProvider: Type.Optional(Type.String()),
    version: Type.Optional(Type.String()),
    enabled: Type.Optional(Type.Boolean({ default: true })),
    pricing: Type.Optional(
      Type.Object(
        {
          currency: Type.Optional(Type.Literal('USD')),
          elements: Type.Array(
            Type.Object(
              {
                name: Type.String(),
                unitPrice: Type.Optional(Price),
                aggregationType: Type.String({ description: 'SUM, COUNT, AVERAGE, MAXIMUM or DISTINCT' }),
                tiersMode: Type.Optional(Type.String({ description: 'volume (default) or graduated' })),
                tiers: Type.Optional(Type.Array(Type.Object({ upTo: Type.Union([Type.Number({ exclusiveMinimum: 0 }), Type.Null()]), unitPrice: Price }))),
              },
              { additionalProperties: false },
            ),
          ),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
)

export const schema = Type.Object(
  {
    api: Type.Boolean({ default: true, description: 'Serve /{api_prefix}/v2/api/tools (CRUD, by-tool-id, restore, unpriced-events)' }),
    tools: Type.Array(DeclaredToolSchema, { default: [], description: 'Operator-managed tools (configSource YAML); PUT through the API makes them MERGED' }),
  },
  { additionalProperties: false },
)
export type Config = Static<typeof schema>

type Declared = Config['tools'][number]

/** One declared tool, parsed by the API's own validator; a problem comes with its path under the extension. */
function parseDeclared(t: Declared, i: number): DeclaredTool | { path: string; message: string } {
  const { team, ...body } = t
  try {
    return { team: team ?? '*', spec: parseToolSpec(body) }
  } catch (err) {
    const e = err as ApiError
    return { path: `tools[${i}]${e.param ? '.' + e.param : ''}`, message: e.message }
  }
}

/** Parses the declared tools with the API's own validator, so both say the same about a bad tool. */
export function declaredTools(config: Pick<Config, 'tools'>): DeclaredTool[] {
  return config.tools.map((t, i) => {
    const d = parseDeclared(t, i)
    if ('message' in d) throw new Error(`extensions.tools.${d.path}: ${d.message}`)
    return d
  })
}

export const toolsDescriptor: Descriptor<ExtensionFactory<typeof schema>> = {
  kind: 'extension',
  type: 'tools',
  description: 'The tool registry: /{api_prefix}/v2/api/tools and tools declared in YAML',
  schema,
  check(config, ctx) {
    config.tools.forEach((t, i) => {
      const d = parseDeclared(t, i)
      if ('message' in d) ctx.issue(d.path, d.message)
    })
  },
}
