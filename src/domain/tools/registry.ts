import type { Database } from 'lmdb'
import { conflict, notFound, ApiError } from '../../core/errors.js'
import { newId } from '../../core/ids.js'
import type { RowChange, SharedTables, TableView } from '../../ports/tables.js'
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
    return this.shown(team, id, this.shownTools.get([team, id]), withDeleted)
  }

  /** The tool `id` given its stored row `t` (none for a YAML tool without an overlay). */
  private shown(team: string, id: string, t: Tool | undefined, withDeleted = false): Tool | undefined {
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
    return this.change(team, (rows) => {
      // A new id (a ULID) held by another tool already: never in practice, and never overwritten.
      if (rows.tool(tool.id) !== undefined) throw new Error(`tool ${tool.id} exists already`)
      if (rows.owner(spec.toolId) !== undefined) throw duplicate(spec.toolId)
      rows.putTool(tool)
      rows.setOwner(spec.toolId, tool.id)
      return tool
    })
  }

  /**
   * PUT: the body's fields over the current ones (the CLI sends the whole tool back), validated
   * as a whole. On a YAML tool this stores an overlay (MERGED); its toolId cannot change.
   */
  async update(team: string, id: string, body: unknown, now: number): Promise<Tool> {
    // Merged over the tool as the change reads it (change()): no PUT undoes a deletion, reuses a
    // revision number, or loses a field another PUT changed meanwhile.
    return this.change(team, (rows) => {
      const current = this.shown(team, id, rows.tool(id))
      if (!current) throw notFound(`no tool with id ${id}`, 'id')
      if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new ApiError(400, 'invalid_request_error', 'invalid_body', 'the body must be a JSON object')
      const merged = { ...specOf(current), ...changesOf(body as Record<string, unknown>) }
      if (current.configSource !== 'DATABASE' && merged.toolId !== current.toolId)
        throw new ApiError(400, 'invalid_request_error', 'invalid_field', 'toolId of a tool declared in the config cannot change', { param: 'toolId' })
      const spec = parseToolSpec(merged)
      const next: Tool = {
        ...spec,
        id: current.id,
        team,
        configSource: current.configSource === 'DATABASE' ? 'DATABASE' : 'MERGED',
        created: current.created,
        updated: new Date(now).toISOString(),
        revision: current.revision + 1,
      }
      const owner = rows.owner(spec.toolId)
      if (owner !== undefined && owner !== id) throw duplicate(spec.toolId)
      if (spec.toolId !== current.toolId && this.declaration(team, spec.toolId)) throw duplicate(spec.toolId)
      if (spec.toolId !== current.toolId) rows.setOwner(current.toolId, undefined)
      rows.putTool(next)
      rows.setOwner(spec.toolId, id)
      return next
    })
  }

  /** Soft delete: the tool leaves the registry (its events go unpriced) until restored. */
  async remove(team: string, id: string, now: number): Promise<Tool> {
    const at = new Date(now).toISOString()
    return this.change(team, (rows) => {
      // Built from the row as the change reads it: a PUT committed meanwhile keeps its revision number.
      const current = this.shown(team, id, rows.tool(id))
      if (!current) throw notFound(`no tool with id ${id}`, 'id')
      if (current.configSource !== 'DATABASE') throw declaredInConfig(current.toolId)
      const gone: Tool = { ...current, deleted: at, updated: at, revision: current.revision + 1 }
      rows.putTool(gone)
      if (rows.owner(current.toolId) === id) rows.setOwner(current.toolId, undefined)
      return gone
    })
  }

  async restore(team: string, id: string, now: number): Promise<Tool> {
    return this.change(team, (rows) => {
      const current = this.shown(team, id, rows.tool(id), true)
      if (!current) throw notFound(`no tool with id ${id}`, 'id')
      // Restored meanwhile (or never deleted): nothing left to do.
      if (!current.deleted) return current
      if (this.declaration(team, current.toolId) || rows.owner(current.toolId) !== undefined) throw duplicate(current.toolId)
      const { deleted: _, ...rest } = current
      const back: Tool = { ...rest, updated: new Date(now).toISOString(), revision: current.revision + 1 }
      rows.putTool(back)
      rows.setOwner(current.toolId, id)
      return back
    })
  }

  /**
   * Runs a change of a team's tools: `plan` reads the rows it depends on and says what to write
   * (or throws, and nothing is written). In one process (or workers sharing one LMDB) it runs in
   * the write transaction, on the rows as they are there. In a gateway cluster the rows it read
   * are checked against Redis, where every replica's change lands first (replaceRows): when one
   * changed meanwhile, the plan runs again over the rows Redis holds, so a change made on another
   * replica at the same moment is merged, not undone, and a toolId two replicas create at once
   * goes to one of them (the other gets the 409 one process gives).
   */
  private async change<T>(team: string, plan: (rows: ToolRows) => T): Promise<T> {
    if (!this.shared) {
      let out = { err: new Error('not run') } as { ok: T } | { err: unknown }
      await this.written(
        this.tools.transaction(() => {
          const writes = new Map<string, () => void>()
          const rows: ToolRows = {
            tool: (id) => this.tools.get([team, id]),
            owner: (toolId) => this.ids.get([team, toolId]),
            putTool: (t) => void writes.set(`t${t.id}`, () => this.tools.put([team, t.id], t)),
            setOwner: (toolId, id) => void writes.set(`i${toolId}`, () => (id === undefined ? this.ids.remove([team, toolId]) : this.ids.put([team, toolId], id))),
          }
          try {
            out = { ok: plan(rows) }
          } catch (err) {
            return void (out = { err })
          }
          for (const w of writes.values()) w()
        }),
      )
      if ('err' in out) throw out.err
      return out.ok
    }
    // The rows Redis answered it holds, read instead of this replica's (perhaps older) copies.
    const known = new Map<string, { value: unknown }>()
    for (;;) {
      const read = new Map<string, RowChange>()
      const row = (db: string, key: Key, view: TableView<Key, unknown>): RowChange => {
        const id = db + JSON.stringify(key)
        let r = read.get(id)
        if (!r) {
          const k = known.get(id)
          const v = k ? k.value : view.get(key)
          read.set(id, (r = { db, key, read: v, value: v }))
        }
        return r
      }
      const result = plan({
        tool: (id) => row('tools', [team, id], this.shownTools).read as Tool | undefined,
        owner: (toolId) => row('tool-ids', [team, toolId], this.shownIds).read as string | undefined,
        putTool: (t) => void (row('tools', [team, t.id], this.shownTools).value = t),
        setOwner: (toolId, id) => void (row('tool-ids', [team, toolId], this.shownIds).value = id),
      })
      const rows = [...read.values()]
      const done = await this.shared.replaceRows(rows)
      if (done.outcome !== 'changed') {
        this.forget()
        this.onChange?.()
        return result
      }
      done.now.forEach((now, i) => now && known.set(rows[i].db + JSON.stringify(rows[i].key), now))
    }
  }
}

/** The rows of one team a registry change reads (as the change sees them) and writes. */
interface ToolRows {
  tool(id: string): Tool | undefined
  /** The id of the live tool that holds `toolId`. */
  owner(toolId: string): string | undefined
  putTool(tool: Tool): void
  /** `toolId` held by the tool `id`; undefined: free. */
  setOwner(toolId: string, id: string | undefined): void
}

/**
 * A PUT body's fields as changes to a tool. A field sent as null is absent, as DESIGN's input rules
 * take null (what Python's None and Go's nil pointers send for a field the caller did not set): it
 * keeps its value, so `enabled: null` never turns a disabled tool on, nor `pricing: null` wipe its
 * prices. `provider` is `toolProvider`, as at creation (`toolProvider` wins when both are sent).
 */
function changesOf(body: Record<string, unknown>): Record<string, unknown> {
  // No prototype: a body's own "__proto__" key stays a key, not the object's prototype.
  const changes: Record<string, unknown> = Object.create(null)
  for (const [k, v] of Object.entries(body)) if (v !== null) changes[k] = v
  if (changes.provider !== undefined && changes.toolProvider === undefined) changes.toolProvider = changes.provider
  delete changes.provider
  return changes
}

function specOf(t: Tool): Record<string, unknown> {
  const { id: _i, team: _t, configSource: _c, created: _cr, updated: _u, revision: _r, deleted: _d, ...spec } = t
  return spec
}

const duplicate = (toolId: string) => conflict('duplicate_tool_id', `a tool with toolId "${toolId}" already exists in this team`)
const declaredInConfig = (toolId: string) =>
  conflict('tool_declared_in_config', `tool "${toolId}" is declared in the YAML config; remove it there (PUT may change it)`)
