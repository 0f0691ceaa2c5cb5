import type { Database, Key, RootDatabase } from 'lmdb'
import type { WriteUnit } from '../ports/write-unit.js'
import type { ValueEncoderClass } from './record-codec.js'
import type { tupleKeyEncoder } from './tuple-key.js'

/** How a named database is opened (Store.db). */
export interface DbOptions {
  dupSort?: boolean
  sharedStructures?: boolean
  /** Derives the database's value encoder from lmdb-js's msgpack one (record-codec.ts). */
  codec?: (msgpack: ValueEncoderClass) => ValueEncoderClass
  /** Replaces ordered-binary for the keys (LMDB then compares them with memcmp: tuple-key.ts). */
  keyEncoder?: typeof tupleKeyEncoder
}

/**
 * What the store's parts (the usage tables and their layout migration, a write unit) use of the
 * LMDB environment that holds them. Store (store.ts) is the one: it makes them and hands itself
 * over, so they depend on this and not on the class that depends on them.
 */
export interface Environment {
  readonly opts: { readonly path: string }
  readonly root: RootDatabase
  db<K extends Key = Key, V = any>(name: string, opts?: DbOptions): Database<V, K>
  putIfAbsent<K extends Key, V>(db: Database<V, K>, key: K, value: V): boolean
  durable<T>(write: Promise<T>, onDurable?: () => void): Promise<T>
  /** Runs `run` in a write transaction shared with the units queued meanwhile; resolves once durable. */
  commitUnit(run: () => void, onDurable: () => void): Promise<void>
  unit(): WriteUnit
}
