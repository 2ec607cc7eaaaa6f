/**
 * Reader worker of the content FUSE server: a dedicated thread that does blocking reads of
 * `/dev/fuse` and hands each request to the main thread.
 *
 * Why a thread with blocking reads: libuv's async fs reads go through the thread pool and cost
 * ~500 µs per request; a blocking `read(2)` in a dedicated thread wakes as soon as the kernel
 * queues a request (DESIGN §2). Several workers may read the same descriptor: the kernel hands
 * each request to exactly one reader.
 *
 * The worker copies each request out of its 1 MiB read buffer into an exact-size ArrayBuffer and
 * transfers it to the main thread through its own MessagePort (not parentPort, so the main thread
 * can poll it synchronously with receiveMessageOnPort while it busy-waits for the next request). FORGET, BATCH_FORGET and INTERRUPT need no reply and no state
 * here (node ids are never recycled), so they are dropped in the worker and only counted in the
 * shared control array.
 *
 * Exit conditions: `read` fails with ENODEV (connection aborted or unmounted), EBADF (descriptor
 * closed), or the stop flag is set while the device is not mounted yet (EPERM).
 */
import { readSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import { CTRL_BATCH_FORGET, CTRL_FORGET, CTRL_INTERRUPT, CTRL_STOP, type ReaderWorkerData, type ReaderWorkerMessage } from './control.js';

const OP_FORGET = 2;
const OP_INTERRUPT = 36;
const OP_BATCH_FORGET = 42;

function run(): void {
  if (!parentPort) return;
  const { fd, bufSize, ctrl: ctrlSab, port } = workerData as ReaderWorkerData;
  const ctrl = new Int32Array(ctrlSab);
  const buf = Buffer.allocUnsafe(bufSize);
  for (;;) {
    let n: number;
    try {
      n = readSync(fd, buf, 0, bufSize, null);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENODEV' || code === 'EBADF') return; // unmounted / aborted / closed
      if (code === 'EINTR' || code === 'ENOENT' || code === 'EAGAIN') continue; // request vanished; read again
      if (code === 'EPERM') {
        // Device not mounted yet: wait a little unless asked to stop.
        if (Atomics.load(ctrl, CTRL_STOP) !== 0) return;
        Atomics.wait(ctrl, CTRL_STOP, 0, 2);
        continue;
      }
      const msg: ReaderWorkerMessage = { type: 'fatal', code: code ?? 'EUNKNOWN', message: (err as Error).message };
      port.postMessage(msg);
      return;
    }
    if (n < 40) continue;
    const opcode = buf.readUInt32LE(4);
    if (opcode === OP_FORGET) {
      Atomics.add(ctrl, CTRL_FORGET, 1);
      continue;
    }
    if (opcode === OP_BATCH_FORGET) {
      Atomics.add(ctrl, CTRL_BATCH_FORGET, 1);
      continue;
    }
    if (opcode === OP_INTERRUPT) {
      Atomics.add(ctrl, CTRL_INTERRUPT, 1);
      continue;
    }
    const ab = new ArrayBuffer(n);
    new Uint8Array(ab).set(buf.subarray(0, n));
    port.postMessage(ab, [ab]);
  }
}

run();
