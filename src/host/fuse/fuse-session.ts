/**
 * What a content FUSE server that takes over a live connection needs to know (the connection
 * outlives the server when a supervisor keeps its /dev/fuse descriptor, see
 * src/daemon/supervisor/supervisor.ts):
 *
 * - the session state (`<hostDir>/content-session.json`): the connection id, the protocol
 *   minor negotiated at INIT (done once per connection: a successor never sees INIT), the
 *   time stamp every attribute reports, and whether the server served on a clone of the
 *   supervisor's descriptor;
 * - the node log (`<hostDir>/content-nodes.bin`): every content object given a node id, in
 *   order, 40 bytes each (32-byte digest, size as u64 LE). The kernel keeps the node ids it
 *   learned from LOOKUP (dentries live for a day); a successor replays the log to answer for
 *   the same ids. Each record is written before the reply that hands the id out, and no fsync
 *   is needed: the connection does not survive a host crash.
 */
import { closeSync, fstatSync, ftruncateSync, openSync, readFileSync, writeSync } from 'node:fs';
import { replaceFilePrivateSync } from '../../core/private-fs.js';

/** The state of a content FUSE connection that a successor can take over. */
export interface FuseSessionState {
  v: 1;
  /** The connection id (the mount's minor device number; /sys/fs/fuse/connections/<id>). */
  connId: number;
  /** The protocol minor the kernel negotiated at INIT. */
  protoMinor: number;
  /** atime/mtime/ctime (seconds) of every content file. */
  mountTime: number;
  /** True when the server read requests from a clone of the supervisor's descriptor (a death then only fails its in-flight requests). */
  cloned: boolean;
  /** The mount point. */
  mountpoint: string;
}

/** Bytes per node log record. */
const RECORD = 40;

/** Reads the session state, or undefined when absent or unreadable. */
export function readSessionState(file: string): FuseSessionState | undefined {
  try {
    const s = JSON.parse(readFileSync(file, 'utf8')) as FuseSessionState;
    return s.v === 1 && Number.isInteger(s.connId) && Number.isInteger(s.protoMinor) ? s : undefined;
  } catch {
    return undefined;
  }
}

/** Writes the session state atomically (mode 0600). */
export function writeSessionState(file: string, s: FuseSessionState): void {
  replaceFilePrivateSync(file, JSON.stringify(s));
}

/** The append-only log of node ids handed out on one connection (see the file comment). */
export class NodeLog {
  private fd: number;
  private pending: Buffer[] = [];

  /** Opens the log; `fresh` truncates it (a new connection), else a torn last record is cut off so that new ones stay aligned. */
  constructor(
    readonly file: string,
    fresh: boolean,
  ) {
    this.fd = openSync(file, fresh ? 'w' : 'a', 0o600);
    const size = fstatSync(this.fd).size;
    if (size % RECORD !== 0) ftruncateSync(this.fd, size - (size % RECORD));
  }

  /** The records of a log: [64-hex digest, size in bytes] in node id order (a torn last record is dropped). */
  static read(file: string): [string, number][] {
    let b: Buffer;
    try {
      b = readFileSync(file);
    } catch {
      return [];
    }
    const out: [string, number][] = [];
    for (let o = 0; o + RECORD <= b.length; o += RECORD) out.push([b.toString('hex', o, o + 32), Number(b.readBigUInt64LE(o + 32))]);
    return out;
  }

  /** Queues a record (written by {@link flush}). */
  add(hex: string, size: number): void {
    const r = Buffer.allocUnsafe(RECORD);
    r.write(hex, 0, 32, 'hex');
    r.writeBigUInt64LE(BigInt(size), 32);
    this.pending.push(r);
  }

  /** Writes the queued records (one write). @throws the write's error (the caller must not hand the ids out) */
  flush(): void {
    if (this.pending.length === 0) return;
    const b = this.pending.length === 1 ? this.pending[0]! : Buffer.concat(this.pending);
    this.pending = [];
    let off = 0;
    while (off < b.length) off += writeSync(this.fd, b, off, b.length - off);
  }

  close(): void {
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
  }
}
