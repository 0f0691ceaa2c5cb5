// The apikeys extension as a config sees it: schema, defaults and checks, for `validate`, `print-config`
// and `docs`. Its implementation (index.ts) is loaded when one is created (src/components.ts).
import { Type, type Static } from '@sinclair/typebox'
import type { Descriptor, ExtensionFactory } from '../../host/component.js'

/** The shortest first admin key accepted (bootstrap_key or METERD_BOOTSTRAP_API_KEY). */
export const MIN_BOOTSTRAP_KEY = 20

const schema = Type.Object(
  {
    bootstrap: Type.Boolean({ default: true, description: 'On an empty key store, create a first admin key: bootstrap_key, else METERD_BOOTSTRAP_API_KEY (neither is printed), else a random one printed once on stdout' }),
    bootstrap_key: Type.Optional(Type.String({ minLength: MIN_BOOTSTRAP_KEY, description: 'Use this value as the first admin key instead of a random one (it wins over METERD_BOOTSTRAP_API_KEY)' })),
  },
  { additionalProperties: false },
)
export type Config = Static<typeof schema>

export const apikeysDescriptor: Descriptor<ExtensionFactory<typeof schema>> = {
  kind: 'extension',
  type: 'apikeys',
  description: 'API keys stored hashed in LMDB; authenticates x-api-key and Authorization: Bearer',
  schema,
}
