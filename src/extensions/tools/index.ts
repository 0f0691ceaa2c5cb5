import type { Component, CreateSettings, ExtensionFactory, Host } from '../../host/component.js'
import { shareChanges } from '../../core/cluster/bus.js'
import { ToolRegistry } from '../../domain/tools/registry.js'
import { mountToolRoutes } from './routes.js'
import { declaredTools, toolsDescriptor, type Config } from './descriptor.js'

/**
 * The tool registry extension (SPEC Tool): owns the registry and mounts its routes. The pricing
 * processor finds it through the host to price tool events.
 */
export class ToolsExtension implements Component {
  registry?: ToolRegistry

  constructor(private readonly settings: CreateSettings, private readonly config: Config) {}

  async start(host: Host): Promise<void> {
    const registry = (this.registry = new ToolRegistry(host.store, declaredTools(this.config), new Date(host.now()).toISOString()))
    shareChanges(host.cluster, `${this.settings.id}.changed`, registry, () => registry.forget())
    if (host.shared) await registry.share(host.shared.tables)
    if (this.config.api) mountToolRoutes(host, this.registry)
    this.settings.logger.debug({ declared: this.config.tools.length }, 'tool registry ready')
  }

  async shutdown(): Promise<void> {}
}

export const toolsFactory: ExtensionFactory<typeof toolsDescriptor.schema> = {
  ...toolsDescriptor,
  create: (settings, config) => new ToolsExtension(settings, config),
}
