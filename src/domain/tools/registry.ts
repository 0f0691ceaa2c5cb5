import type { Database } from 'lmdb'
import { conflict, notFound, ApiError } from '../../core/errors.js'
import { newId } from '../../core/ids.js'
import type { SharedTables, TableView } from '../../ports/tables.js'
import type { Store } from '../../store/store.js'
import { parseToolSpec, type Tool, type ToolSpec } from './tool.js'

/** A tool declared in the YAML config: for every team (`team: '*'`, the default) or one. */
export interface DeclaredTool {
  team: string
  spec: ToolSpec
}

type Key = string[]
const ANY_TEAM = '*'

/**
 * The tool registry (SPEC Tool), per team. Tools created through the API live in LMDB
 * (`tools`: [team, id] → Tool; `tool-ids`: [team, toolId] → id for live tools, which makes
 * toolId unique per team). Tools declared in the YAML config are read-only through the API
 * except by PUT, which stores an overlay in LMDB: the result shows `configSource: MERGED`.
 * Lookups by toolId are cached per process; a write clears the cache here and, through
 * onChange, in every other worker (forget()).
 */
export class ToolRegistry {
  private readonly tools: Database<Tool, Key>
  private readonly ids: Database<string, Key>
  /** toolId → declaration, per team key ('*' for all). */
  private readonly declared = new Map<string, Map<string, DeclaredTool>>()
  /** team → toolId → the live tool (null: none). Only this process's API writes the registry; each write clears it. */
  private readonly live = new Map<string, Map<string, Tool | null>>()
  private liveCount = 0
  private shared?: SharedTables
  /** `tools` and `tool-ids` as lookups read them: in a gateway cluster, another replica's change before it is committed here. */
  private readonly shownTools: TableView<Key, Tool>
  private readonly shownIds: TableView<Key, string>
  /** Called after every change this process commits. */
  onChange?: () => void

  constructor(private readonly store: Store, declared: DeclaredTool[] = [], private readonly startedAt = new Date(0).toISOString()) {
    this.tools = store.db<Key, Tool>('tools')
    this.ids = store.db<Key, string>('tool-ids')
    this.shownTools = store.view<Key, Tool>('tools')
    this.shownIds = store.view<Key, string>('tool-ids')
    for (const d of declared) {
      let m = this.declared.get(d.team)
      if (!m) this.declared.set(d.team, (m = new Map()))
      m.set(d.spec.toolId, d)
    }
  }

  /** Gateway cluster: tools are shared with the other replicas; a change there is read (and the lookup cache dropped) here as soon as it arrives. */
  async share(tables: SharedTables): Promise<void> {
    this.shared = tables
    const changed = () => this.forget()
    await tables.attach([
      { db: 'tools', changed },
      { db: 'tool-ids', changed },
    ])
  }

  /** Rows a write changed, to the other replicas (gateway cluster). */
  private async wrote(team: string, id: string, toolIds: string[]): Promise<void> {
    if (!this.shared) return
    await this.shared.wrote('tools', [[team, id]])
    await this.shared.wrote('tool-ids', toolIds.map((t) => [team, t]))
  }

  static yamlId(toolId: string): string {
    return `yaml-${toolId}`
  }

  private declaration(team: string, toolId: string): DeclaredTool | undefined {
    return this.declared.get(team)?.get(toolId) ?? this.declared.get(ANY_TEAM)?.get(toolId)
  }

  private fromYaml(team: string, d: DeclaredTool): Tool {
    return { ...d.spec, id: ToolRegistry.yamlId(d.spec.toolId), team, configSource: 'YAML', created: this.startedAt, updated: this.startedAt, revision: 0 }
  }

  /** Commits a registry change durably and drops the lookup cache, so the next event sees it. */
  private async written<T>(write: Promise<T>): Promise<T> {
    try {
      return await this.store.durable(write)
    } finally {
      this.forget()
      this.onChange?.()
    }
  }

  /** Drops the lookup cache: the next event reads the registry from LMDB. */
  forget(): void {
    // Read afresh from here on: the change that made this call may be newer than the snapshot
    // lmdb-js still reads through (Store.readLatest).
    this.store.readLatest()
    this.live.clear()
    this.liveCount = 0
  }

  /** The live tool a team's events with this toolId are priced by (cached: every event asks). */
  byToolId(team: string, toolId: string): Tool | undefined {
    // Two lookups by the strings as they came: no key to build (and hash) per event.
    let byId = this.live.get(team)
    const hit = byId?.get(toolId)
    if (hit !== undefined) return hit ?? undefined
    const found = this.lookup(team, toolId)
    if (this.liveCount >= 10_000) {
      this.live.clear()
      this.liveCount = 0
      byId = undefined
    }
    if (!byId) this.live.set(team, (byId = new Map()))
    byId.set(toolId, found ?? null)
    this.liveCount++
    return found
  }

  private lookup(team: string, toolId: string): Tool | undefined {
    const id = this.shownIds.get([team, toolId])
    if (id !== undefined) {
      const t = this.shownTools.get([team, id])
      if (t && !t.deleted) return t
    }
    const d = this.declaration(team, toolId)
    return d ? this.fromYaml(team, d) : undefined
  }

  /** A tool by its id, including a deleted one (for restore) when `withDeleted`. */
  get(team: string, id: string, withDeleted = false): Tool | undefined {
    const t = this.shownTools.get([team, id])
    if (t && (!t.deleted || withDeleted)) return t
    if (t) return undefined
    if (id.startsWith('yaml-')) {
      const d = this.declaration(team, id.slice(5))
      if (d) return this.fromYaml(team, d)
    }
    return undefined
  }

  /** A team's tools, sorted by toolId: its own and the YAML ones (an overlay shown once, MERGED). */
  list(team: string, opts: { withDeleted?: boolean } = {}): Tool[] {
    const out = new Map<string, Tool>()
    const deleted: Tool[] = []
    for (const { value } of this.shownTools.range({ start: [team], end: [team, '\uffff'] })) {
      if (value.deleted) {
        if (opts.withDeleted) deleted.push(value)
      } else out.set(value.toolId, value)
    }
    for (const m of [this.declared.get(ANY_TEAM), this.declared.get(team)]) {
      for (const d of m?.values() ?? []) if (!out.has(d.spec.toolId)) out.set(d.spec.toolId, this.fromYaml(team, d))
    }
    return [...out.values(), ...deleted].sort((a, b) => (a.toolId < b.toolId ? -1 : a.toolId > b.toolId ? 1 : a.id < b.id ? -1 : 1))
  }

  async create(team: string, body: unknown, now: number): Promise<Tool> {
    const spec = parseToolSpec(body)
    const at = new Date(now).toISOString()
    const tool: Tool = { ...spec, id: newId(now), team, configSource: 'DATABASE', created: at, updated: at, revision: 1 }
    if (this.declaration(team, spec.toolId)) throw duplicate(spec.toolId)
    let ok = false
    await this.shared?.writable()
    await this.written(
      this.tools.transaction(() => {
        if (this.ids.get([team, spec.toolId]) !== undefined) return
        this.tools.put([team, tool.id], tool)
        this.ids.put([team, spec.toolId], tool.id)
        ok = true
      }),
    )
    if (!ok) throw duplicate(spec.toolId)
    await this.wrote(team, tool.id, [spec.toolId])
    return tool
  }

  /**
   * PUT: the body's fields over the current ones (the CLI sends the whole tool back), validated
   * as a whole. On a YAML tool this stores an overlay (MERGED); its toolId cannot change.
   */
  async update(team: string, id: string, body: unknown, now: number): Promise<Tool> {
    // A write committed between the read below and this one's transaction (another PUT, a
    // DELETE) is found in the transaction: a deleted tool is a 404, a changed one is read again
    // and the body merged over it, so no PUT undoes a deletion or reuses a revision number.
    for (;;) {
      const current = this.get(team, id)
      if (!current) throw notFound(`no tool with id ${id}`, 'id')
      if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new ApiError(400, 'invalid_request_error', 'invalid_body', 'the body must be a JSON object')
      const merged = { ...specOf(current), ...(body as Record<string, unknown>) }
      if (current.configSource !== 'DATABASE' && merged.toolId !== current.toolId)
        throw new ApiError(400, 'invalid_request_error', 'invalid_field', 'toolId of a tool declared in the config cannot change', { param: 'toolId' })
      const spec = parseToolSpec(merged)
      const at = new Date(now).toISOString()
      const next: Tool = {
        ...spec,
        id: current.id,
        team,
        configSource: current.configSource === 'DATABASE' ? 'DATABASE' : 'MERGED',
        created: current.created,
        updated: at,
        revision: current.revision + 1,
      }
      let outcome = 'done' as 'done' | 'clash' | 'gone' | 'changed'
      await this.shared?.writable()
      await this.written(
        this.tools.transaction(() => {
          const stored = this.tools.get([team, id])
          if (stored?.deleted) return void (outcome = 'gone')
          if (current.configSource === 'YAML' ? stored !== undefined : stored?.revision !== current.revision) return void (outcome = 'changed')
          const owner = this.ids.get([team, spec.toolId])
          if (owner !== undefined && owner !== id) return void (outcome = 'clash')
          if (spec.toolId !== current.toolId && this.declaration(team, spec.toolId)) return void (outcome = 'clash')
          if (spec.toolId !== current.toolId) this.ids.remove([team, current.toolId])
          this.tools.put([team, id], next)
          this.ids.put([team, spec.toolId], id)
        }),
      )
      if (outcome === 'changed') continue
      if (outcome === 'gone') throw notFound(`no tool with id ${id}`, 'id')
      if (outcome === 'clash') throw duplicate(spec.toolId)
      await this.wrote(team, id, spec.toolId === current.toolId ? [spec.toolId] : [spec.toolId, current.toolId])
      return next
    }
  }

  /** Soft delete: the tool leaves the registry (its events go unpriced) until restored. */
  async remove(team: string, id: string, now: number): Promise<Tool> {
    const current = this.get(team, id)
    if (!current) throw notFound(`no tool with id ${id}`, 'id')
    if (current.configSource !== 'DATABASE') throw declaredInConfig(current.toolId)
    const at = new Date(now).toISOString()
    let gone = undefined as Tool | undefined
    await this.shared?.writable()
    await this.written(
      this.tools.transaction(() => {
        // Built from the row as it is now: a PUT committed meanwhile keeps its revision number.
        const latest = this.tools.get([team, id])
        if (!latest || latest.deleted) return
        gone = { ...latest, deleted: at, updated: at, revision: latest.revision + 1 }
        this.tools.put([team, id], gone)
        if (this.ids.get([team, latest.toolId]) === id) this.ids.remove([team, latest.toolId])
      }),
    )
    if (!gone) throw notFound(`no tool with id ${id}`, 'id')
    await this.wrote(team, id, [gone.toolId])
    return gone
  }

  async restore(team: string, id: string, now: number): Promise<Tool> {
    const current = this.get(team, id, true)
    if (!current) throw notFound(`no tool with id ${id}`, 'id')
    if (!current.deleted) return current
    if (this.declaration(team, current.toolId)) throw duplicate(current.toolId)
    let clash = false
    let back = undefined as Tool | undefined
    await this.shared?.writable()
    await this.written(
      this.tools.transaction(() => {
        const latest = this.tools.get([team, id])
        if (!latest) return
        // Restored meanwhile: this restore has nothing left to do.
        if (!latest.deleted) return void (back = latest)
        if (this.ids.get([team, latest.toolId]) !== undefined) return void (clash = true)
        const { deleted: _, ...rest } = latest
        back = { ...rest, updated: new Date(now).toISOString(), revision: latest.revision + 1 }
        this.tools.put([team, id], back)
        this.ids.put([team, latest.toolId], id)
      }),
    )
    if (clash) throw duplicate(current.toolId)
    if (!back) throw notFound(`no tool with id ${id}`, 'id')
    await this.wrote(team, id, [current.toolId])
    return back
  }
}

function specOf(t: Tool): Record<string, unknown> {
  const { id: _i, team: _t, configSource: _c, created: _cr, updated: _u, revision: _r, deleted: _d, ...spec } = t
  return spec
}

const duplicate = (toolId: string) => conflict('duplicate_tool_id', `a tool with toolId "${toolId}" already exists in this team`)
const declaredInConfig = (toolId: string) =>
  conflict('tool_declared_in_config', `tool "${toolId}" is declared in the YAML config; remove it there (PUT may change it)`)
