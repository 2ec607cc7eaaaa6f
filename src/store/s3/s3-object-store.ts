import {
  AbortMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  PutObjectCommand,
  S3Client,
  paginateListObjectsV2,
  type S3ClientConfig,
} from '@aws-sdk/client-s3';
import { setTimeout as delay } from 'node:timers/promises';
import { AwcError } from '../../core/errors.js';
import { redactUrl } from '../../config/backend-url.js';
import type { ListedObject, ObjectStore } from '../object/object-store.js';
import { s3ToAwcError, type S3Context } from './s3-errors.js';
import { multipartUpload } from './s3-multipart.js';

const MiB = 1024 * 1024;

/** Options of {@link S3ObjectStore}. Sizes in bytes, times in ms. */
export interface S3ObjectStoreOptions {
  bucket: string;
  /** Key prefix of every object ('' or ending with '/'); default ''. */
  prefix?: string;
  /** An S3-compatible server's URL (MinIO, Ceph, s3rver…); default: AWS S3 of the region. */
  endpoint?: string;
  /** Default `AWS_REGION`, else `AWS_DEFAULT_REGION`, else `us-east-1`. */
  region?: string;
  /** Path-style URLs (`endpoint/bucket/key`) instead of virtual hosts (`bucket.endpoint/key`); default: true when an endpoint is given. */
  forcePathStyle?: boolean;
  /** Default: the SDK's default chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, AWS_PROFILE, ~/.aws/credentials and config, SSO, web identity, container and instance roles). */
  credentials?: S3ClientConfig['credentials'];
  /** Attempts per request, the first included (the SDK's retry strategy: exponential backoff with jitter on throttling, 5xx, timeouts and network errors); default 5. */
  maxAttempts?: number;
  /** The SDK's retry mode: `standard`, or `adaptive` (also rate-limits the client after throttling); default `standard`. */
  retryMode?: 'standard' | 'adaptive';
  /** Bodies of at least this many bytes go up as a multipart upload; default 64 MiB. */
  multipartThresholdBytes?: number;
  /** Bytes per part of a multipart upload; default 16 MiB (AWS S3 wants ≥ 5 MiB). */
  partBytes?: number;
  /** Parts uploaded at once; default 4. */
  partConcurrency?: number;
  /** Time to open a connection (ms); default 10 s. */
  connectionTimeoutMs?: number;
  /** Time a request's socket may stay silent (ms); default 120 s. */
  requestTimeoutMs?: number;
  /** Injection point: called after a multipart upload was created, before its parts (tests). */
  onMultipartCreated?: (key: string, uploadId: string) => void | Promise<void>;
}

const SEGMENT = /^[A-Za-z0-9._-]+$/;

/**
 * The object store on S3 or an S3-compatible server (AWS SDK v3, `@aws-sdk/client-s3`).
 * Key `k` is the object `<prefix>k` of the bucket.
 *
 * - `put` is create-only and idempotent without conditional writes: keys are
 *   content-addressed (same key, same bytes), so a HEAD first and no PUT when the object
 *   exists is enough; two racing writers put the same bytes. Bodies of at least
 *   `multipartThresholdBytes` go up in parts ({@link multipartUpload}); an object is
 *   visible only once whole.
 * - `get` with a range is one ranged GET (`Range: bytes=a-b`); a range past the end gives
 *   the bytes that exist, none when it starts at or after the end (S3's 416).
 * - Retries: the SDK's retry strategy (`maxAttempts`, `retryMode`) on every request. What
 *   it does not cover, a response body cut off midway, is retried here, as often.
 * - Checksums are computed and validated only where S3 requires them
 *   (`WHEN_REQUIRED`): s3rver stores aws-chunked (streamed, checksummed) uploads
 *   corrupted, and every object's bytes are checked against their digest by its readers.
 * - The bucket is checked once (HeadBucket) before the first call, so a missing bucket,
 *   refused credentials or an endpoint that does not answer are reported as such
 *   (E_BUCKET_NOT_FOUND, E_OBJECT_STORE_DENIED, E_OBJECT_STORE_UNAVAILABLE), never as a
 *   missing object. See {@link s3ToAwcError} for every code.
 */
export class S3ObjectStore implements ObjectStore {
  readonly bucket: string;
  readonly prefix: string;
  private readonly client: S3Client;
  private readonly endpoint?: string;
  private readonly maxAttempts: number;
  private readonly threshold: number;
  private readonly partBytes: number;
  private readonly partConcurrency: number;
  private readonly onMultipartCreated?: S3ObjectStoreOptions['onMultipartCreated'];
  private bucketChecked?: Promise<void>;

  /** @throws E_CONFIG for a bad prefix or option */
  constructor(opts: S3ObjectStoreOptions) {
    this.bucket = opts.bucket;
    this.prefix = opts.prefix ?? '';
    if (this.prefix !== '' && (!this.prefix.endsWith('/') || !this.prefix.slice(0, -1).split('/').every(okSegment)))
      throw new AwcError('E_CONFIG', `invalid S3 key prefix ${JSON.stringify(this.prefix)}`, {
        hint: 'A prefix is "" or "a/b/" (segments of letters, digits, ".", "_", "-").',
      });
    this.endpoint = opts.endpoint === undefined ? undefined : redactUrl(opts.endpoint);
    this.maxAttempts = positive(opts.maxAttempts ?? 5, 'maxAttempts');
    this.threshold = positive(opts.multipartThresholdBytes ?? 64 * MiB, 'multipartThresholdBytes');
    this.partBytes = positive(opts.partBytes ?? 16 * MiB, 'partBytes');
    this.partConcurrency = positive(opts.partConcurrency ?? 4, 'partConcurrency');
    this.onMultipartCreated = opts.onMultipartCreated;
    // The pinned SDK is the last line that supports Node 20 (docs/decisions.md); its warning that later ones will not is not for AWC's users.
    process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
    this.client = new S3Client({
      region: opts.region ?? (process.env.AWS_REGION || process.env.AWS_DEFAULT_REGION || 'us-east-1'),
      endpoint: opts.endpoint,
      forcePathStyle: opts.forcePathStyle ?? opts.endpoint !== undefined,
      credentials: opts.credentials,
      maxAttempts: this.maxAttempts,
      retryMode: opts.retryMode ?? 'standard',
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
      // socketTimeout is the silence that ends a request (the handler's `requestTimeout` only logs a warning, so a server that
      // stopped answering hung a checkpoint forever; and a whole-request limit would end a long upload that is moving)
      requestHandler: { connectionTimeout: opts.connectionTimeoutMs ?? 10_000, socketTimeout: opts.requestTimeoutMs ?? 120_000 },
    });
  }

  /** Stores `body` (bytes) under `key` unless an object is there already. @throws E_PATH_TRAVERSAL for a bad key, and the codes of {@link s3ToAwcError} */
  async put(key: string, body: Uint8Array): Promise<void> {
    const full = this.key(key);
    if (await this.has(key)) return;
    const ctx = this.ctx(body.length >= this.threshold ? 'MultipartUpload' : 'PutObject', full);
    try {
      if (body.length >= this.threshold) {
        const hook = this.onMultipartCreated;
        await multipartUpload(
          {
            client: this.client,
            bucket: this.bucket,
            key: full,
            partBytes: this.partBytes,
            concurrency: this.partConcurrency,
            onCreated: hook && ((id) => hook(key, id)),
          },
          body,
        );
      } else {
        await this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: full, Body: body, ContentLength: body.length }));
      }
    } catch (err) {
      throw s3ToAwcError(err, ctx);
    }
  }

  /** Reads the object, or `range.length` bytes from `range.offset` (fewer past the end). @throws E_OBJECT_NOT_FOUND, and the codes of {@link s3ToAwcError} */
  async get(key: string, range?: { offset: number; length: number }): Promise<Buffer> {
    const full = this.key(key);
    if (range) {
      if (!Number.isSafeInteger(range.offset) || !Number.isSafeInteger(range.length) || range.offset < 0 || range.length < 0)
        throw new AwcError('E_INTERNAL', `bad range ${range.offset}+${range.length} for ${key}`);
      if (range.length === 0) {
        await this.size(key);
        return Buffer.alloc(0);
      }
    }
    await this.checkBucket();
    const ctx = this.ctx('GetObject', full);
    const Range = range ? `bytes=${range.offset}-${range.offset + range.length - 1}` : undefined;
    for (let attempt = 1; ; attempt++) {
      let resp;
      try {
        resp = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: full, Range }));
      } catch (err) {
        const e = err as { name?: string; $metadata?: { httpStatusCode?: number } };
        if (range && (e.name === 'InvalidRange' || e.$metadata?.httpStatusCode === 416)) return Buffer.alloc(0); // starts at or past the end
        throw s3ToAwcError(err, ctx);
      }
      const got = range ? contentRange(resp.ContentRange) : undefined;
      if (range && got !== undefined && got.total <= range.offset) {
        // Starts at or past the end (a server that answers 206 for it instead of S3's 416): no bytes.
        (resp.Body as { destroy?: () => void } | undefined)?.destroy?.();
        return Buffer.alloc(0);
      }
      let bytes: Buffer;
      try {
        const arr = resp.Body ? await resp.Body.transformToByteArray() : new Uint8Array(0);
        if (resp.ContentLength !== undefined && arr.length !== resp.ContentLength)
          throw Object.assign(new Error(`response body cut off: ${arr.length} of ${resp.ContentLength} bytes`), { code: 'ECONNRESET' });
        bytes = Buffer.from(arr.buffer, arr.byteOffset, arr.byteLength);
      } catch (err) {
        // The SDK retries requests, not the reading of a response that has begun: a body cut off midway is read again here.
        if (attempt >= this.maxAttempts) {
          const e = err as { $metadata?: object; code?: string; message?: string };
          throw s3ToAwcError(
            Object.assign(new Error(e.message ?? String(err)), { code: e.code ?? 'ECONNRESET', $metadata: { attempts: attempt } }),
            ctx,
          );
        }
        await delay(Math.random() * Math.min(2000, 100 * 2 ** attempt));
        continue;
      }
      if (!range) return bytes;
      // A server may answer a range with more than asked, or with the whole object (HTTP allows a 200): cut out what was asked.
      const start = got?.start ?? 0;
      if (start > range.offset)
        throw s3ToAwcError(
          Object.assign(new Error(`asked for ${Range}, got ${resp.ContentRange}`), { name: 'BadRange', $metadata: {} }),
          ctx,
        );
      return bytes.subarray(range.offset - start, range.offset - start + range.length);
    }
  }

  /** True when the object exists (one HEAD). @throws the codes of {@link s3ToAwcError} */
  async has(key: string): Promise<boolean> {
    return (await this.head(key)) !== undefined;
  }

  /** Size in bytes (one HEAD). @throws E_OBJECT_NOT_FOUND, and the codes of {@link s3ToAwcError} */
  async size(key: string): Promise<number> {
    const n = await this.head(key);
    if (n === undefined) throw new AwcError('E_OBJECT_NOT_FOUND', `object s3://${this.bucket}/${this.key(key)} not found`);
    return n;
  }

  /** Removes the object (GC only); absent is not an error. @throws the codes of {@link s3ToAwcError} */
  async delete(key: string): Promise<void> {
    const full = this.key(key);
    await this.checkBucket();
    try {
      await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: full }));
    } catch (err) {
      const e = s3ToAwcError(err, this.ctx('DeleteObject', full));
      if (e.code !== 'E_OBJECT_NOT_FOUND') throw e;
    }
  }

  /** Lists keys starting with `prefix` (any string) with their sizes in bytes and LastModified (ms), a page (≤ 1000 keys) per ListObjectsV2 call. @throws the codes of {@link s3ToAwcError} */
  async *list(prefix: string): AsyncIterable<ListedObject> {
    await this.checkBucket();
    const pages = paginateListObjectsV2({ client: this.client }, { Bucket: this.bucket, Prefix: this.prefix + prefix });
    const ctx = this.ctx('ListObjectsV2');
    const it = pages[Symbol.asyncIterator]();
    for (;;) {
      let page;
      try {
        page = await it.next();
      } catch (err) {
        throw s3ToAwcError(err, ctx);
      }
      if (page.done) return;
      for (const o of page.value.Contents ?? [])
        if (o.Key !== undefined && o.Key.startsWith(this.prefix))
          yield { key: o.Key.slice(this.prefix.length), size: o.Size ?? 0, modifiedMs: o.LastModified?.getTime() ?? Date.now() }; // none given: as if just stored (nothing ages it out)
    }
  }

  /**
   * Aborts the multipart uploads under the prefix (writers killed midway leave them, and
   * S3 keeps and bills their parts) that the server says were initiated more than
   * `olderThanMs` ago by its own clock (the `Date` of its answer; 0 takes every one).
   * `bytes` is 0: S3 does not say an upload's size without one more call per upload.
   * @throws E_UNSUPPORTED when the server lacks ListMultipartUploads (s3rver), and the codes of {@link s3ToAwcError}
   */
  async sweepIncomplete(olderThanMs: number): Promise<{ removed: number; bytes: number }> {
    await this.checkBucket();
    const ctx = this.ctx('ListMultipartUploads');
    let removed = 0;
    let KeyMarker: string | undefined;
    let UploadIdMarker: string | undefined;
    for (;;) {
      const cmd = new ListMultipartUploadsCommand({ Bucket: this.bucket, Prefix: this.prefix, KeyMarker, UploadIdMarker });
      let serverNow: number | undefined;
      cmd.middlewareStack.add(
        (next) => async (args) => {
          const out = await next(args);
          const date = (out.response as { headers?: Record<string, string> }).headers?.date;
          if (date !== undefined && !Number.isNaN(Date.parse(date))) serverNow = Date.parse(date);
          return out;
        },
        { step: 'deserialize', name: 'awcServerDate' },
      );
      let page;
      try {
        page = await this.client.send(cmd);
      } catch (err) {
        throw s3ToAwcError(err, ctx);
      }
      const cutoff = olderThanMs <= 0 ? Infinity : (serverNow ?? Date.now()) - olderThanMs;
      for (const u of page.Uploads ?? []) {
        if (!u.Key || !u.UploadId || !u.Key.startsWith(this.prefix)) continue;
        if (olderThanMs > 0 && (!u.Initiated || u.Initiated.getTime() >= cutoff)) continue;
        try {
          await this.client.send(new AbortMultipartUploadCommand({ Bucket: this.bucket, Key: u.Key, UploadId: u.UploadId }));
          removed++;
        } catch (err) {
          if ((err as { name?: string }).name !== 'NoSuchUpload') throw s3ToAwcError(err, this.ctx('AbortMultipartUpload', u.Key)); // else: completed or aborted meanwhile
        }
      }
      if (!page.IsTruncated) return { removed, bytes: 0 };
      KeyMarker = page.NextKeyMarker;
      UploadIdMarker = page.NextUploadIdMarker;
      if (KeyMarker === undefined) return { removed, bytes: 0 };
    }
  }

  /** Closes the client's connections (the store is unusable afterwards). */
  close(): void {
    this.client.destroy();
  }

  /** Size of the object, or undefined when there is none. */
  private async head(key: string): Promise<number | undefined> {
    const full = this.key(key);
    await this.checkBucket();
    try {
      const r = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: full }));
      return r.ContentLength ?? 0;
    } catch (err) {
      const e = s3ToAwcError(err, this.ctx('HeadObject', full));
      if (e.code === 'E_OBJECT_NOT_FOUND') return undefined;
      throw e;
    }
  }

  /** One HeadBucket per store before its first call (again after a failure): a missing bucket or refused credentials are told as such. */
  private checkBucket(): Promise<void> {
    this.bucketChecked ??= this.client.send(new HeadBucketCommand({ Bucket: this.bucket })).then(
      () => undefined,
      (err: unknown) => {
        this.bucketChecked = undefined;
        const e = err as { name?: string; $metadata?: { httpStatusCode?: number } };
        // HeadBucket answers without a body: a 404 is the bucket's.
        if (e.$metadata?.httpStatusCode === 404)
          err = Object.assign(new Error('no such bucket'), { name: 'NoSuchBucket', $metadata: e.$metadata });
        throw s3ToAwcError(err, this.ctx('HeadBucket'));
      },
    );
    return this.bucketChecked;
  }

  private key(key: string): string {
    if (!key.split('/').every(okSegment)) throw new AwcError('E_PATH_TRAVERSAL', `invalid object key ${JSON.stringify(key)}`);
    return this.prefix + key;
  }

  private ctx(operation: string, key?: string): S3Context {
    return { operation, bucket: this.bucket, key, endpoint: this.endpoint };
  }
}

/** `bytes <start>-<end>/<total>` of a Content-Range header (`total` Infinity when `*`), or undefined. */
function contentRange(header: string | undefined): { start: number; total: number } | undefined {
  const m = header === undefined ? null : /^bytes (\d+)-\d+\/(\d+|\*)$/.exec(header.trim());
  if (!m) return undefined;
  return { start: Number(m[1]), total: m[2] === '*' ? Infinity : Number(m[2]) };
}

function okSegment(s: string): boolean {
  return SEGMENT.test(s) && s !== '.' && s !== '..';
}

function positive(n: number, what: string): number {
  if (!Number.isSafeInteger(n) || n < 1) throw new AwcError('E_CONFIG', `S3 option ${what} must be a positive integer (got ${n})`);
  return n;
}
