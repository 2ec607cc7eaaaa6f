import { toAwcError } from '../../src/core/errors.js';
import type { ListedObject, ObjectStore } from '../../src/store/object/object-store.js';
import { s3ToAwcError } from '../../src/store/s3/s3-errors.js';

/**
 * A fault-injecting ObjectStore (a fake only to inject faults): it wraps a real one
 * (FsObjectStore or S3ObjectStore) and delegates every call, except the calls a scripted rule
 * picks, which fail as that backend fails:
 *
 * - `fail`: the call throws what the adapter throws for a broken backend: EIO on a directory
 *   store (E_IO), a 500 `InternalError` after the SDK's retries on S3 (E_OBJECT_STORE_UNAVAILABLE);
 * - `timeout`: the call hangs `timeoutMs`, past the client's own timeout, then throws what that
 *   timeout gives: ETIMEDOUT of a soft network mount (E_IO), the SDK's `TimeoutError` (E_OBJECT_STORE_UNAVAILABLE);
 * - `full`: ENOSPC on a directory store; 507 `XMinioStorageFull` on S3 (E_NO_SPACE both);
 * - `short` (get): the body comes back with its second half cut off;
 * - `corrupt` (get): the body comes back with one byte flipped in its middle (the object stays intact).
 *
 * A put that fails stores nothing (a real failed put leaves no object under the key).
 */
export type StoreOp = 'put' | 'get' | 'has' | 'size' | 'delete' | 'list';
export type StoreFault = 'fail' | 'timeout' | 'full' | 'short' | 'corrupt';

/** One scripted fault: the `nth` call of `op` from now (1 = the next; default: every call), `times` times (default 1). */
export interface FaultRule {
  op: StoreOp;
  fault: StoreFault;
  nth?: number;
  times?: number;
  /** Only calls on keys this accepts count (default: every key). */
  key?: (key: string) => boolean;
}

/** A fault that fired: which call, on which key. */
export interface FiredFault {
  op: StoreOp;
  key: string;
  fault: StoreFault;
}

interface Armed extends FaultRule {
  seen: number;
  left: number;
}

export class FaultStore implements ObjectStore {
  /** Every fault that fired, in order. */
  readonly fired: FiredFault[] = [];
  /** Calls per operation (all of them, faulted or not). */
  readonly calls: Record<StoreOp, number> = { put: 0, get: 0, has: 0, size: 0, delete: 0, list: 0 };
  private rules: Armed[] = [];

  /**
   * @param inner the real store
   * @param backend which backend's errors to throw (`fs`: errno errors through toAwcError; `s3`: SDK errors through s3ToAwcError)
   * @param timeoutMs how long a `timeout` fault hangs before it fails (ms)
   */
  constructor(
    readonly inner: ObjectStore,
    readonly backend: 'fs' | 's3',
    private readonly timeoutMs = 300,
  ) {}

  /** Arms a rule (see FaultRule). */
  inject(rule: FaultRule): this {
    this.rules.push({ ...rule, seen: 0, left: rule.times ?? 1 });
    return this;
  }

  /** Disarms every rule. */
  clear(): void {
    this.rules = [];
  }

  async put(key: string, body: Uint8Array): Promise<void> {
    const f = this.pick('put', key);
    if (f === 'short' || f === 'corrupt') throw new Error(`fault-store: ${f} is a fault of reads, not of put`);
    if (f) await this.failAs(f, 'put', key);
    return this.inner.put(key, body);
  }

  async get(key: string, range?: { offset: number; length: number }): Promise<Buffer> {
    const f = this.pick('get', key);
    if (f === 'fail' || f === 'timeout' || f === 'full') await this.failAs(f, 'get', key);
    const b = await this.inner.get(key, range);
    if (f === 'short') return b.subarray(0, b.length >> 1);
    if (f === 'corrupt' && b.length > 0) {
      const c = Buffer.from(b);
      c[c.length >> 1]! ^= 0x20;
      return c;
    }
    return b;
  }

  async has(key: string): Promise<boolean> {
    const f = this.pick('has', key);
    if (f) await this.failAs(f, 'has', key);
    return this.inner.has(key);
  }

  async size(key: string): Promise<number> {
    const f = this.pick('size', key);
    if (f) await this.failAs(f, 'size', key);
    return this.inner.size(key);
  }

  async delete(key: string): Promise<void> {
    const f = this.pick('delete', key);
    if (f) await this.failAs(f, 'delete', key);
    return this.inner.delete(key);
  }

  async *list(prefix: string): AsyncIterable<ListedObject> {
    const f = this.pick('list', prefix);
    if (f) await this.failAs(f, 'list', prefix);
    yield* this.inner.list(prefix);
  }

  sweepIncomplete(olderThanMs: number): Promise<{ removed: number; bytes: number }> {
    return this.inner.sweepIncomplete(olderThanMs);
  }

  /** The fault for this call, if a rule picks it (and counts it). */
  private pick(op: StoreOp, key: string): StoreFault | undefined {
    this.calls[op]++;
    for (const r of this.rules) {
      if (r.op !== op || r.left <= 0 || (r.key && !r.key(key))) continue;
      r.seen++;
      if (r.nth !== undefined && r.seen < r.nth) continue;
      r.left--;
      this.fired.push({ op, key, fault: r.fault });
      return r.fault;
    }
    return undefined;
  }

  /** Throws (after the hang of a timeout) what the backend's adapter throws for `fault`. */
  private async failAs(fault: StoreFault, op: StoreOp, key: string): Promise<never> {
    if (fault === 'timeout') await new Promise((r) => setTimeout(r, this.timeoutMs));
    if (this.backend === 'fs') {
      const [code, text] =
        fault === 'full'
          ? ['ENOSPC', 'no space left on device']
          : fault === 'timeout'
            ? ['ETIMEDOUT', 'connection timed out']
            : ['EIO', 'i/o error'];
      const syscall = op === 'put' ? 'write' : 'read';
      throw toAwcError(Object.assign(new Error(`${code}: ${text}, ${syscall}`), { code, syscall, errno: -5 }));
    }
    const operation = {
      put: 'PutObject',
      get: 'GetObject',
      has: 'HeadObject',
      size: 'HeadObject',
      delete: 'DeleteObject',
      list: 'ListObjectsV2',
    }[op];
    const sdk =
      fault === 'full'
        ? {
            name: 'XMinioStorageFull',
            message: 'Storage backend has reached its minimum free drive threshold. Please delete a few objects to proceed.',
            $fault: 'server',
            $metadata: { httpStatusCode: 507, attempts: 1 },
          }
        : fault === 'timeout'
          ? { name: 'TimeoutError', message: `Connection timed out after ${this.timeoutMs} ms`, $metadata: { attempts: 5 } }
          : {
              name: 'InternalError',
              message: 'We encountered an internal error. Please try again.',
              $fault: 'server',
              $metadata: { httpStatusCode: 500, attempts: 5 },
            };
    throw s3ToAwcError(Object.assign(new Error(sdk.message), sdk), { operation, bucket: 'fault-store', key });
  }
}
