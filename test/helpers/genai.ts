/**
 * Runs the genai connector alone: OTLP/JSON → the decoder → the connector → captured usage
 * records. A tool registry on a real LMDB store declares `web-search` for every team.
 */
import { Registry } from 'prom-client'
import { pino } from 'pino'
import type { Host } from '../../src/host/component.js'
import type { Batch, BatchContext } from '../../src/core/consumer.js'
import { componentMetrics } from '../../src/core/telemetry.js'
import { genaiFactory } from '../../src/connectors/genai/index.js'
import { ToolRegistry } from '../../src/domain/tools/registry.js'
import { parseToolSpec } from '../../src/domain/tools/tool.js'
import type { Caller, UsageRecord } from '../../src/model/usage-record.js'
import { Store } from '../../src/store/store.js'
import { decodeLogsJson, decodeTracesJson } from '../../src/transport/otlp/decode-json.js'
import { decodeLogsProto, decodeTracesProto } from '../../src/transport/otlp/decode-proto.js'
import type { ConnectorRun } from './otlp.js'
import { protoOf } from './otlp.js'
import { removeDir, tempDir } from './meterd.js'

export const CALLER: Caller = { account: 'acct-1', tenant: 'tenant-1', team: 'team-1', environment: 'prod', keyId: 'key-1' }
export const NOW = Date.parse('2026-11-22T00:00:00.000Z')
export const API_KEY_ATTRIBUTES = ['service.api_key', 'revenium.api_key']

export interface Harness {
  /**
   * `readOnly`: decode traces as the otlp receiver does when the genai connector is their only
   * consumer (DecodeOptions.spans from its spanInterest; the batch carries BatchContext.filtered).
   */
  run(signal: 'traces' | 'logs', json: unknown, opts?: { encoding?: 'json' | 'protobuf'; readOnly?: boolean; config?: Record<string, unknown>; ctx?: BatchContext }): Promise<ConnectorRun>
}

export async function genaiHarness(t: { teardown(fn: () => unknown): void }): Promise<Harness> {
  const dir = tempDir('meterd-genai-')
  const store = new Store({ path: dir })
  t.teardown(async () => {
    await store.close()
    removeDir(dir)
  })
  const registry = new ToolRegistry(store, [{ team: '*', spec: parseToolSpec({ toolId: 'web-search', name: 'Web search', toolType: 'REST_API' }) }])
  const host = {
    store,
    usage: store.usage,
    now: () => NOW,
    extensions: () => new Map([['tools', { registry, start: async () => {}, shutdown: async () => {} }]]),
  } as unknown as Host
  return {
    async run(signal, json, opts = {}) {
      // Nothing here writes the records to the store, so only repeats within one export are deduplicated.
      const config = { attribute_prefixes: ['service.', 'revenium.'], drop_attributes: (genaiFactory.schema.properties.drop_attributes as any).default, dedup_window_hours: 24, ...opts.config }
      const captured: UsageRecord[] = []
      const prom = new Registry()
      const connector = genaiFactory.create(
        { id: 'genai', logger: pino({ level: 'silent' }), metrics: componentMetrics(prom, 'connector', 'genai'), registry: prom },
        config as never,
        { usage: { consume: async (b: Batch) => void captured.push(...b.items) } },
        // The records reach the pipeline through ingest, in a batch of their own.
      )
      await connector.start(host)
      const keys = { apiKeyAttributes: API_KEY_ATTRIBUTES, spans: opts.readOnly ? connector.consumers.traces!.spanInterest : undefined }
      const proto = opts.encoding === 'protobuf'
      const ctx: BatchContext = opts.ctx ?? { caller: CALLER }
      let items: unknown[]
      if (signal === 'traces') {
        const decoded = proto ? decodeTracesProto(protoOf('traces', json), keys) : decodeTracesJson(json, keys)
        items = decoded.items
        if (decoded.positions) ctx.filtered = { count: decoded.accepted, positions: decoded.positions }
      } else items = (proto ? decodeLogsProto(protoOf('logs', json), keys) : decodeLogsJson(json, keys)).items
      let error: Error | undefined
      try {
        await connector.consumers[signal]!.consume({ items: items as never[], ctx })
      } catch (err) {
        error = err as Error
      }
      return { records: captured.map((r) => ({ kind: r.kind, body: r.body as Record<string, unknown> })), rejected: ctx.rejected ?? [], error }
    },
  }
}
