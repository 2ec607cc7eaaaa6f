/**
 * The reader threads of a FUSE server (reader-worker.ts): each does blocking reads of the
 * device and posts every request it does not answer itself to the main thread, on its own
 * MessagePort, so the main thread can also poll the ports synchronously while it spins.
 */
import { MessageChannel, Worker, receiveMessageOnPort, type MessagePort } from 'node:worker_threads';
import { AwcError } from '../../core/errors.js';
import type { ReaderWorkerData, ReaderWorkerMessage, TableUpdate } from './control.js';

/** Longest stretch of synchronous request handling before yielding to the event loop (ms). */
const SPIN_CAP_MS = 2;

/** What a worker posts: a request (transferred), the node id of content it served, or a failure. */
export type ReaderPost = ArrayBuffer | number | ReaderWorkerMessage;

/** A set of reader workers on one /dev/fuse descriptor; started once, stopped once. */
export class ReaderPool {
  private workers: Worker[] = [];
  private ports: MessagePort[] = [];
  /** Per worker: where a new content table buffer is posted. */
  private tablePorts: MessagePort[] = [];
  private closed = false;

  /**
   * @param count worker threads to start
   * @param spinMs after a message, keep polling the ports this long (0 = off; see FuseServerOptions.spinUs)
   * @param onMessage called on the main thread for every message, in order
   * @param onError a worker's own failure (it crashed, or did not stop)
   */
  constructor(
    private readonly count: number,
    private readonly spinMs: number,
    private readonly onMessage: (msg: ReaderPost) => void,
    private readonly onError: (err: unknown) => void,
  ) {}

  /** Starts the workers; `data` is what each gets besides its own ports. */
  start(data: Omit<ReaderWorkerData, 'port' | 'tablePort'>): void {
    const url = new URL('./reader-worker.js', import.meta.url);
    for (let i = 0; i < this.count; i++) {
      const { port1, port2 } = new MessageChannel();
      const tables = new MessageChannel();
      const workerData: ReaderWorkerData = { ...data, port: port2, tablePort: tables.port2 };
      const w = new Worker(url, { workerData, transferList: [port2, tables.port2], name: `awc-fuse-reader-${i}` });
      tables.port1.unref();
      this.tablePorts.push(tables.port1);
      port1.on('message', (msg: ReaderPost) => {
        this.onMessage(msg);
        this.spin();
      });
      port1.unref(); // the Worker keeps the process alive while mounted, not the port
      w.on('error', (err) => this.onError(err));
      this.workers.push(w);
      this.ports.push(port1);
    }
  }

  /** Posts new table (and arena node array) buffers to every worker (the caller then moves the generation they watch). */
  publish(update: TableUpdate): void {
    for (const p of this.tablePorts) p.postMessage(update);
  }

  /** Busy-polls the worker ports for up to spinMs after the last request (capped at SPIN_CAP_MS). */
  private spin(): void {
    if (this.spinMs <= 0) return;
    const start = performance.now();
    const cap = start + SPIN_CAP_MS;
    let deadline = start + this.spinMs;
    const ports = this.ports;
    for (;;) {
      let got = false;
      for (let i = 0; i < ports.length; i++) {
        const r = receiveMessageOnPort(ports[i]!);
        if (r) {
          this.onMessage(r.message as ReaderPost);
          got = true;
        }
      }
      const now = performance.now();
      if (got) deadline = now + this.spinMs;
      if (now >= deadline || now >= cap || this.closed) return;
    }
  }

  /**
   * Waits for every worker to exit (they do when the device read fails with ENODEV, or EPERM
   * with the stop flag set), then closes the ports. A worker still blocked after 5 s (the
   * connection survives, e.g. an overlay holds it and fusectl is missing) is unref'ed and
   * reported, so it does not keep the process alive.
   */
  async stop(): Promise<void> {
    await Promise.all(
      this.workers.map(
        (w) =>
          new Promise<void>((resolve) => {
            if (w.threadId < 0) return resolve();
            const t = setTimeout(() => {
              w.unref();
              this.onError(new AwcError('E_FUSE', 'content FUSE reader did not stop; connection may still be alive'));
              resolve();
            }, 5_000);
            w.once('exit', () => {
              clearTimeout(t);
              resolve();
            });
          }),
      ),
    );
    this.workers = [];
    for (const p of this.ports) p.close();
    this.ports = [];
    for (const p of this.tablePorts) p.close();
    this.tablePorts = [];
    this.closed = true;
  }
}
