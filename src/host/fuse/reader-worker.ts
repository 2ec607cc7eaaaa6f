/**
 * Reader worker of the content FUSE server: a dedicated thread that does blocking reads of
 * `/dev/fuse` and hands each request to the main thread.
 *
 * Why a thread with blocking reads: libuv's async fs reads go through the thread pool and cost
 * ~500 µs per request; a blocking `read(2)` in a dedicated thread wakes as soon as the kernel
 * queues a request (docs/explanation/design.md#content-fuse-server). Several workers may read the same descriptor: the kernel hands
 * each request to exactly one reader.
 *
 * The worker copies each request out of its 1 MiB read buffer into an exact-size ArrayBuffer and
 * transfers it to the main thread through its own MessagePort (not parentPort, so the main thread
 * can poll it synchronously with receiveMessageOnPort while it busy-waits for the next request). FORGET, BATCH_FORGET and INTERRUPT need no reply and no state
 * here (node ids are never recycled), so they are dropped in the worker and only counted in the
 * shared control array.
 *
 * LOOKUPs of content files are answered here, from the shared content table (content-table.ts),
 * when it holds the name: the reply is written to the device by this thread, and only counted
 * (CTRL_WORKER_LOOKUP). So are READs of content in the hot arena (content-arena.ts), counted
 * (CTRL_WORKER_READ) and reported to the main thread afterwards (the node id, for the cache's
 * bookkeeping, off the reader's path). Anything else — directories, names the table does not
 * hold (yet), an ambiguous short name, content not in the arena or overwritten while it was
 * copied — goes to the main thread, which knows everything.
 *
 * Exit conditions: `read` fails with ENODEV (connection aborted or unmounted), EBADF (descriptor
 * closed), or the stop flag is set while the device is not mounted yet (EPERM).
 */
import { readSync, writeSync } from 'node:fs';
import { parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import { contentKeyIn } from '../../core/content-name.js';
import { lookupSlot, slotNode, slotSize, slotSparse } from './content-table.js';
import { readFromArena, type ArenaView } from './content-arena.js';
import {
  CTRL_ARENA_RESERVE,
  CTRL_BATCH_FORGET,
  CTRL_FORGET,
  CTRL_INTERRUPT,
  CTRL_STOP,
  CTRL_TABLE_GEN,
  CTRL_WORKER_LOOKUP,
  CTRL_WORKER_READ,
  DAY,
  DIR_BASE,
  FIRST_FILE_ID,
  GENERATION,
  STALE_REPLY_CODES,
  contentFileAttr,
  type ReaderWorkerData,
  type ReaderWorkerMessage,
  type TableUpdate,
} from './control.js';
import {
  ENTRY_OUT_SIZE,
  FUSE_ROOT_ID,
  IN_HEADER_SIZE,
  OUT_HEADER_SIZE,
  READ_IN_OFFSET,
  READ_IN_SIZE_FIELD,
  encodeEntryOut,
  encodeOutHeader,
  readCString,
  readU64,
  type Attr,
} from './protocol.js';

const OP_LOOKUP = 1;
const OP_FORGET = 2;
const OP_READ = 15;
/** Largest READ the kernel sends (max_pages × 4 KiB, negotiated at INIT). */
const MAX_READ = 256 * 4096;
const OP_INTERRUPT = 36;
const OP_BATCH_FORGET = 42;

/** readRequest's answer when the worker is to end. */
const STOP = -1;

/**
 * Reads one request from the device into `buf`: its length, 0 when there is none to handle (it
 * vanished, or the device is not mounted yet), or STOP when the connection is gone, the descriptor
 * closed, the stop flag set while unmounted, or the read failed otherwise (a `fatal` message posted).
 */
function readRequest(fd: number, buf: Buffer, bufSize: number, ctrl: Int32Array, port: ReaderWorkerData['port']): number {
  try {
    return readSync(fd, buf, 0, bufSize, null);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENODEV' || code === 'EBADF') return STOP; // unmounted / aborted / closed
    if (code === 'EINTR' || code === 'ENOENT' || code === 'EAGAIN') return 0; // request vanished; read again
    if (code === 'EPERM') {
      // Device not mounted yet: wait a little unless asked to stop.
      if (Atomics.load(ctrl, CTRL_STOP) !== 0) return STOP;
      Atomics.wait(ctrl, CTRL_STOP, 0, 2);
      return 0;
    }
    const msg: ReaderWorkerMessage = { type: 'fatal', code: code ?? 'EUNKNOWN', message: (err as Error).message };
    port.postMessage(msg);
    return STOP;
  }
}

/** Counts a FORGET, BATCH_FORGET or INTERRUPT (they need no reply and no state here): true when `opcode` is one. */
function countedOnly(opcode: number, ctrl: Int32Array): boolean {
  if (opcode === OP_FORGET) {
    Atomics.add(ctrl, CTRL_FORGET, 1);
    return true;
  }
  if (opcode === OP_BATCH_FORGET) {
    Atomics.add(ctrl, CTRL_BATCH_FORGET, 1);
    return true;
  }
  if (opcode === OP_INTERRUPT) {
    Atomics.add(ctrl, CTRL_INTERRUPT, 1);
    return true;
  }
  return false;
}

/** Writes a reply to `fd`; a stale request (interrupted, connection gone) is not an error, any other failure is posted as an `error` message. */
function replier(fd: number, port: ReaderWorkerData['port']): (b: Buffer, len: number) => void {
  return (b, len) => {
    try {
      writeSync(fd, b, 0, len);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? 'EUNKNOWN';
      // ENOENT: the request was interrupted; ENODEV & co: the connection is gone (the next read says so)
      if (!STALE_REPLY_CODES.has(code)) {
        const msg: ReaderWorkerMessage = { type: 'error', code, message: (err as Error).message };
        port.postMessage(msg);
      }
    }
  };
}

function run(): void {
  if (!parentPort) return;
  const {
    fd,
    bufSize,
    ctrl: ctrlSab,
    port,
    table,
    tablePort,
    mountTime,
    arena,
    arenaUnits,
    nodes,
    generation,
  } = workerData as ReaderWorkerData;
  const ctrl = new Int32Array(ctrlSab);
  const buf = Buffer.allocUnsafe(bufSize);
  let words = new Int32Array(table);
  let gen = generation;
  const out = Buffer.alloc(OUT_HEADER_SIZE + ENTRY_OUT_SIZE);
  const attr: Attr = contentFileAttr({} as Attr, 0, 0, mountTime);
  const view: ArenaView | undefined =
    arena && nodes ? { bytes: new Uint8Array(arena), units: arenaUnits, nodes: new Int32Array(nodes) } : undefined;
  const dataOut = view ? Buffer.allocUnsafe(OUT_HEADER_SIZE + MAX_READ) : undefined;
  const reserve = (): number => Atomics.add(ctrl, CTRL_ARENA_RESERVE, 0); // RMW: orders the copy before it

  /** Takes the newest table (and arena node array) the main thread posted, if the generation moved. */
  const refresh = (): void => {
    if (Atomics.load(ctrl, CTRL_TABLE_GEN) === gen) return;
    for (let m = receiveMessageOnPort(tablePort); m; m = receiveMessageOnPort(tablePort)) {
      const u = m.message as TableUpdate;
      if (u.generation > gen) {
        words = new Int32Array(u.table);
        if (view && u.nodes) view.nodes = new Int32Array(u.nodes);
        gen = u.generation;
      }
    }
  };

  const reply = replier(fd, port);

  /** Answers a READ of content in the arena; false → leave it to the main thread. */
  const read = (): boolean => {
    if (!view || !dataOut) return false;
    const nodeid = readU64(buf, 16);
    if (nodeid < FIRST_FILE_ID) return false;
    refresh();
    const offset = readU64(buf, IN_HEADER_SIZE + READ_IN_OFFSET);
    const size = Math.min(buf.readUInt32LE(IN_HEADER_SIZE + READ_IN_SIZE_FIELD), MAX_READ);
    const n = readFromArena(view, nodeid - FIRST_FILE_ID, offset, size, dataOut, OUT_HEADER_SIZE, reserve);
    if (n < 0) return false;
    encodeOutHeader(dataOut, OUT_HEADER_SIZE + n, 0, readU64(buf, 8));
    Atomics.add(ctrl, CTRL_WORKER_READ, 1); // before the reply: whoever sees the answer sees it counted
    reply(dataOut, OUT_HEADER_SIZE + n);
    if (offset === 0) port.postMessage(nodeid);
    return true;
  };

  /** Answers a LOOKUP of a content file held by the table; false → leave it to the main thread. */
  const lookup = (n: number): boolean => {
    refresh();
    const key = contentKeyIn(readU64(buf, 16), readCString(buf, IN_HEADER_SIZE, n), FUSE_ROOT_ID, DIR_BASE);
    if (!key) return false;
    const slot = lookupSlot(words, key);
    if (slot < 0 || slotSparse(words, slot)) return false; // a sparse file's st_blocks: the main thread's
    const node = slotNode(words, slot);
    contentFileAttr(attr, node, slotSize(words, slot), mountTime);
    encodeOutHeader(out, out.length, 0, readU64(buf, 8));
    encodeEntryOut(out, OUT_HEADER_SIZE, node, GENERATION, DAY, DAY, attr);
    Atomics.add(ctrl, CTRL_WORKER_LOOKUP, 1); // before the reply, as for READ
    reply(out, out.length);
    return true;
  };
  for (;;) {
    const n = readRequest(fd, buf, bufSize, ctrl, port);
    if (n === STOP) return;
    if (n < 40) continue;
    const opcode = buf.readUInt32LE(4);
    if (opcode === OP_READ && read()) continue;
    if (opcode === OP_LOOKUP && lookup(n)) continue;
    if (countedOnly(opcode, ctrl)) continue;
    const ab = new ArrayBuffer(n);
    new Uint8Array(ab).set(buf.subarray(0, n));
    port.postMessage(ab, [ab]);
  }
}

run();
