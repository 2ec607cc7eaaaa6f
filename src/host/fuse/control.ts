/**
 * Shared definitions between the content FUSE server (main thread) and its reader workers:
 * the data passed at worker start and the layout of the shared control array.
 */

import type { MessagePort } from 'node:worker_threads';
import { S_IFREG, type Attr } from './protocol.js';

/** Data passed to a reader worker at start. */
export interface ReaderWorkerData {
  /** Where to post requests: the main thread polls the other end with receiveMessageOnPort while it spins. */
  port: MessagePort;
  /** The open `/dev/fuse` descriptor (shared by all threads of the process). */
  fd: number;
  /** Size of the read buffer: ≥ FUSE_MIN_READ_BUFFER and ≥ in_header + write_in + max_write. */
  bufSize: number;
  /** Shared control array (Int32Array view): see the CTRL_* indexes. */
  ctrl: SharedArrayBuffer;
  /** The shared content table (see content-table.ts) at start; later ones arrive on `tablePort`. */
  table: SharedArrayBuffer;
  /** Where the main thread posts a new table buffer (`{ table, generation }`) after it grows. */
  tablePort: MessagePort;
  /** The table generation `table` (and `nodes`) belong to. */
  generation: number;
  /** atime/mtime/ctime (seconds) of every content file, as the main thread reports them. */
  mountTime: number;
  /** The hot content arena (content-arena.ts), or undefined when off. */
  arena?: SharedArrayBuffer;
  /** Its size in units (a power of two). */
  arenaUnits: number;
  /** The arena's node array at start; later ones arrive with table updates. */
  nodes?: SharedArrayBuffer;
}

/** A new table buffer, posted on `tablePort` before CTRL_TABLE_GEN moves to `generation`. */
export interface TableUpdate {
  table: SharedArrayBuffer;
  /** The arena's node array (when the arena is on). */
  nodes?: SharedArrayBuffer;
  generation: number;
}

/** Index of the stop flag in the control array (non-zero → workers exit when the device is not mounted). */
export const CTRL_STOP = 0;
/** Index of the counter of FORGET requests dropped by workers. */
export const CTRL_FORGET = 1;
/** Index of the counter of BATCH_FORGET requests dropped by workers. */
export const CTRL_BATCH_FORGET = 2;
/** Index of the counter of INTERRUPT requests dropped by workers. */
export const CTRL_INTERRUPT = 3;
/** Index of the generation of the content table (bumped after a new buffer is posted). */
export const CTRL_TABLE_GEN = 4;
/** Index of the counter of LOOKUPs answered by workers from the content table. */
export const CTRL_WORKER_LOOKUP = 5;
/** Index of the arena writer's reserve position (units, modulo 2^32; see content-arena.ts). */
export const CTRL_ARENA_RESERVE = 6;
/** Index of the counter of READs answered by workers from the arena. */
export const CTRL_WORKER_READ = 7;
/** Number of Int32 slots in the control array. */
export const CTRL_SLOTS = 8;

/** errno codes that mean "the kernel no longer waits for this reply" when writing one (interrupted, or the connection is gone). */
export const STALE_REPLY_CODES: ReadonlySet<string> = new Set(['ENOENT', 'ENODEV', 'ECONNABORTED', 'ENOTCONN', 'EBADF']);

/** One day, in seconds: entry and attribute validity (content never changes under a name). */
export const DAY = 86_400;
/** Generation of every node: node ids are never reused within a mount. */
export const GENERATION = 1;
/** Node id of directory `00`; directory `xy` is DIR_BASE + 0xxy. */
export const DIR_BASE = 2;
/** First node id handed to a content file. */
export const FIRST_FILE_ID = DIR_BASE + 256;

/**
 * Fills `a` with the attributes of a content file (node id, size in bytes; 0400, one
 * link, root-owned, every time `time` seconds), as both the main thread and the workers
 * report them.
 */
export function contentFileAttr(a: Attr, nodeid: number, size: number, time: number): Attr {
  a.ino = nodeid;
  a.size = size;
  a.mode = S_IFREG | 0o400;
  a.nlink = 1;
  a.uid = 0;
  a.gid = 0;
  a.blksize = 4096;
  a.time = time;
  a.blocks = undefined;
  return a;
}

/**
 * Messages a worker posts besides raw requests (which are transferred ArrayBuffers) and the
 * node ids (numbers) of content it served from the arena (offset 0 reads only).
 */
export type ReaderWorkerMessage = { type: 'fatal' | 'error'; code: string; message: string };
