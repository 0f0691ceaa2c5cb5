import { closeSync, fstatSync, openSync, readSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { StartupError } from '../core/startup-error.js'

/** sysexits.h EX_DATAERR: the data file is damaged; meterd refuses to open it. */
export const EX_DATAERR = 65

/** A data file meterd will not open: `message` names the file, what is wrong and what to do. */
export class DamagedStoreError extends Error {
  readonly exitCode = EX_DATAERR
  constructor(readonly file: string, readonly problem: string) {
    super(
      `the data file ${file} is damaged: ${problem}. meterd will not open it (LMDB would crash on it, or it would be taken for a new store). ` +
        `Restore the data directory from a backup, or move ${file} aside to start with an empty store; \`meterd doctor --data-dir DIR\` checks a directory.`,
    )
  }
}

// LMDB's on-disk layout (lmdb-js's liblmdb, mdb.c, 64-bit): two meta pages at the start of
// data.mdb, each a 24-byte page header then MDB_meta. LMDB takes the meta with the larger txnid.
const MDB_MAGIC = 0xbeefc0de
const MDB_DATA_VERSION = 2
const P_META = 0x08
const PAGEHDRSZ = 24
const META = {
  flags: 0x12, // uint16, page header
  magic: PAGEHDRSZ + 0, // uint32
  version: PAGEHDRSZ + 4, // uint32
  psize: PAGEHDRSZ + 24, // uint32, mm_dbs[FREE].md_pad
  freeRoot: PAGEHDRSZ + 64, // uint64, mm_dbs[FREE].md_root
  mainRoot: PAGEHDRSZ + 112, // uint64, mm_dbs[MAIN].md_root
  lastPg: PAGEHDRSZ + 120, // uint64
  txnid: PAGEHDRSZ + 128, // uint64
}
const META_BYTES = PAGEHDRSZ + 144
const P_LEAF = 0x02
const F_SUBDATA = 0x02
const P_INVALID = 2n ** 64n - 1n

interface Meta {
  psize: number
  freeRoot: bigint
  mainRoot: bigint
  lastPg: bigint
  txnid: bigint
}

/** What a sound data file looks like, for `meterd doctor`. */
export interface DataFileSummary {
  file: string
  bytes: number
  pageSize: number
  lastPage: number
  txnid: number
  /** Entries of each named database, as LMDB's header of it counts them (none listed when the main tree outgrew one page). */
  entries: Record<string, number>
}

/**
 * Checks `data.mdb` in `dir` before LMDB maps it: LMDB trusts the file and faults (SIGSEGV,
 * SIGBUS) on a damaged one, and an empty file would be initialised as a new store.
 *
 * Absent: a new store (undefined). Otherwise both meta pages must carry LMDB's magic, the data
 * version and the same page size; the pages the newer meta names (the roots of the free-page
 * tree, of the main tree and of each named database it lists) must lie inside the file; and the
 * file must not be much shorter than the last page the meta says is used (LMDB may leave a few
 * freed pages at the end unwritten; a file missing half of its pages was cut short).
 * Throws DamagedStoreError otherwise.
 */
export function checkDataFile(dir: string): DataFileSummary | undefined {
  checkStoreFileKinds(dir)
  const file = join(dir, 'data.mdb')
  let fd: number
  try {
    fd = openSync(file, 'r')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw err
  }
  try {
    const size = fstatSync(fd).size
    if (size === 0) throw new DamagedStoreError(file, 'it is empty (0 bytes), where a store has at least its two header pages')
    const read = (pos: number, len: number): Buffer => {
      const buf = Buffer.alloc(len)
      const n = pos < size ? readSync(fd, buf, 0, len, pos) : 0
      return n === len ? buf : Buffer.alloc(0)
    }
    const first = meta(file, read(0, META_BYTES), 0)
    const second = meta(file, read(first.psize, META_BYTES), 1)
    if (second.psize !== first.psize) throw new DamagedStoreError(file, `its two header pages disagree on the page size (${first.psize} and ${second.psize})`)
    const live = second.txnid > first.txnid ? second : first
    const pages = BigInt(Math.floor(size / live.psize))
    const inside = (what: string, pg: bigint) => {
      if (pg !== P_INVALID && pg >= pages) throw new DamagedStoreError(file, `${what} is page ${pg}, past its end (${size} bytes: ${pages} pages): the file was cut short`)
    }
    inside('the root of its free-page tree', live.freeRoot)
    inside('the root of its main tree', live.mainRoot)
    if ((live.lastPg + 1n) / 2n > pages) throw new DamagedStoreError(file, `it has ${pages} pages (${size} bytes) where its header says ${live.lastPg + 1n} are in use: the file was cut short`)
    const entries: Record<string, number> = {}
    if (live.mainRoot !== P_INVALID) {
      for (const db of namedRoots(read(Number(live.mainRoot) * live.psize, live.psize))) {
        inside(`the root of its database "${db.name}"`, db.root)
        entries[db.name] = Number(db.entries)
      }
    }
    return { file, bytes: size, pageSize: live.psize, lastPage: Number(live.lastPg), txnid: Number(live.txnid), entries }
  } finally {
    closeSync(fd)
  }
}

/**
 * LMDB's two files, where they exist, must be files (a symbolic link to one is fine): given a
 * directory it crashes (SIGSEGV, for lock.mdb) or fails with a bare EISDIR, and a FIFO blocks the
 * start for ever. Throws a StartupError (exit 78) naming the file.
 */
function checkStoreFileKinds(dir: string): void {
  for (const name of ['data.mdb', 'lock.mdb']) {
    const file = join(dir, name)
    let st
    try {
      st = statSync(file)
    } catch {
      continue // absent: made by LMDB; unreadable: opening it says why
    }
    if (st.isFile()) continue
    const what = st.isDirectory() ? 'a directory' : st.isFIFO() ? 'a FIFO' : st.isSocket() ? 'a socket' : 'a device'
    const fix =
      name === 'lock.mdb'
        ? 'remove it (LMDB makes its reader table, lock.mdb, again), or point storage.path (METERD_DATA_DIR) elsewhere'
        : 'move it out of the data directory (meterd then starts an empty store), or point storage.path (METERD_DATA_DIR) elsewhere'
    throw new StartupError(`the store file ${file} is ${what}, not a file LMDB can open`, fix)
  }
}

function meta(file: string, b: Buffer, n: 0 | 1): Meta {
  const which = n === 0 ? 'first' : 'second'
  if (b.length < META_BYTES) throw new DamagedStoreError(file, `it is too short to hold its ${which} header page`)
  if (b.readUInt32LE(META.magic) !== MDB_MAGIC || !(b.readUInt16LE(META.flags) & P_META)) {
    throw new DamagedStoreError(file, `its ${which} header page is not an LMDB header (overwritten, or not an LMDB file)`)
  }
  const version = b.readUInt32LE(META.version)
  if (version !== MDB_DATA_VERSION) throw new DamagedStoreError(file, `its ${which} header page has data format version ${version}, where this build reads ${MDB_DATA_VERSION}`)
  const psize = b.readUInt32LE(META.psize)
  if (psize < 512 || psize > 65536 || (psize & (psize - 1)) !== 0) throw new DamagedStoreError(file, `its ${which} header page names an impossible page size (${psize})`)
  return { psize, freeRoot: b.readBigUInt64LE(META.freeRoot), mainRoot: b.readBigUInt64LE(META.mainRoot), lastPg: b.readBigUInt64LE(META.lastPg), txnid: b.readBigUInt64LE(META.txnid) }
}

/**
 * The named databases of a main-tree root that is a leaf page (a store has a few dozen: they
 * fit one page), with the root page and the entry count of each. A branch root is not followed
 * (an empty list).
 */
function namedRoots(page: Buffer): { name: string; root: bigint; entries: bigint }[] {
  const out: { name: string; root: bigint; entries: bigint }[] = []
  if (page.length < PAGEHDRSZ || !(page.readUInt16LE(0x12) & P_LEAF)) return out
  // mp_lower and the node offsets count from the end of the page header (PAGEBASE = PAGEHDRSZ).
  const keys = page.readUInt16LE(0x14) >> 1
  for (let i = 0; i < keys && PAGEHDRSZ + 2 * i + 2 <= page.length; i++) {
    const node = PAGEHDRSZ + page.readUInt16LE(PAGEHDRSZ + 2 * i)
    // MDB_node: mn_lo, mn_hi (data size), mn_flags, mn_ksize, then the key and the data (an
    // MDB_db: md_entries at 32, md_root at 40).
    if (node + 8 > page.length) continue
    const flags = page.readUInt16LE(node + 4)
    const ksize = page.readUInt16LE(node + 6)
    const data = node + 8 + ksize
    if (!(flags & F_SUBDATA) || data + 48 > page.length) continue
    out.push({ name: page.toString('utf8', node + 8, node + 8 + ksize).replace(/\0$/, ''), root: page.readBigUInt64LE(data + 40), entries: page.readBigUInt64LE(data + 32) })
  }
  return out
}
