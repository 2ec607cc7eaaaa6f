/** One object of a listing: key, size in bytes, and when it was stored (ms since the epoch, the store's clock). */
export interface ListedObject {
  key: string;
  size: number;
  modifiedMs: number;
}

/**
 * The object store port: immutable, content-addressed objects (packs). Writes are
 * create-only and idempotent; nothing is overwritten in place. Adapters: `FsObjectStore`
 * (a local directory) and `S3ObjectStore` (a bucket). Every adapter runs the contract suite
 * test/contracts/object-store.contract.ts.
 */
export interface ObjectStore {
  /**
   * Stores `body` under `key` if absent (idempotent; an existing object is left as is). The
   * store holds no reference to `body` once the call settled: the caller may then reuse its
   * memory (a ContentWriter builds its next pack in it).
   */
  put(key: string, body: Uint8Array): Promise<void>;
  /**
   * Reads an object, or `length` bytes from `offset` (bytes). A range reaching past the end
   * returns the bytes that exist (none when it starts at or after the end, or `length` is 0).
   * @throws AwcError E_OBJECT_NOT_FOUND
   */
  get(key: string, range?: { offset: number; length: number }): Promise<Buffer>;
  /** True when the object exists. */
  has(key: string): Promise<boolean>;
  /** Size in bytes. @throws AwcError E_OBJECT_NOT_FOUND */
  size(key: string): Promise<number>;
  /** Removes an object (GC only); absent is not an error. */
  delete(key: string): Promise<void>;
  /**
   * Lists keys under a prefix with their sizes (bytes) and when they were stored
   * (`modifiedMs`, ms since the epoch by the store's clock: a file's mtime, S3's
   * LastModified), in no particular order.
   */
  list(prefix: string): AsyncIterable<ListedObject>;
  /**
   * Removes what writers killed in the middle of a `put` left behind (a directory store's
   * temporary files, an S3 store's unfinished multipart uploads) that is older than
   * `olderThanMs` (ms; 0 takes everything). Never touches a stored object. Returns how many
   * were removed and their bytes (0 where the backend does not tell).
   */
  sweepIncomplete(olderThanMs: number): Promise<{ removed: number; bytes: number }>;
}
