/**
 * Shared definitions between the content FUSE server (main thread) and its reader workers:
 * the data passed at worker start and the layout of the shared control array.
 */

import type { MessagePort } from 'node:worker_threads';

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
}

/** Index of the stop flag in the control array (non-zero → workers exit when the device is not mounted). */
export const CTRL_STOP = 0;
/** Index of the counter of FORGET requests dropped by workers. */
export const CTRL_FORGET = 1;
/** Index of the counter of BATCH_FORGET requests dropped by workers. */
export const CTRL_BATCH_FORGET = 2;
/** Index of the counter of INTERRUPT requests dropped by workers. */
export const CTRL_INTERRUPT = 3;
/** Number of Int32 slots in the control array. */
export const CTRL_SLOTS = 4;

/** Messages a worker posts besides raw requests (which are transferred ArrayBuffers). */
export type ReaderWorkerMessage = { type: 'fatal'; code: string; message: string };
