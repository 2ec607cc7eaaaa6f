import { AwcError } from '../../core/errors.js';
import type { ChunkRef } from '../../core/tree.js';
import { decodeBlob } from './pack.js';
import type { BlobLocation } from './pack-types.js';

/**
 * One ranged read of a pack: `length` bytes from byte `offset`. `refetch` is true for the
 * second read of a single blob after its first copy failed verification (a reader that
 * shares reads keeps those apart).
 */
export type PackRangeRead = (pack: string, offset: number, length: number, refetch: boolean) => Promise<Buffer>;

/** What a {@link BlobDecoder} reports (all optional; called synchronously, never to throw). */
export interface BlobDecoderHooks {
  /** A blob failed verification (or came back short) once; it is read again on its own. */
  refetch?(loc: BlobLocation, error: unknown): void;
  /** A blob failed verification twice: its reader gets E_INTEGRITY. */
  integrityError?(loc: BlobLocation, error: unknown): void;
}

/**
 * Blob decoding with verify-and-refetch, shared by `ContentReader` and the host's
 * `ChunkFetcher`: every blob is decoded (lz4 or stored) and verified against its digest
 * (decodeBlob); a blob that fails, or a short read, is read once more with its own ranged read
 * (`refetch` true); when that fails too the reader gets E_INTEGRITY and nothing else.
 *
 * A blob decoded from a larger span is copied when it is stored uncompressed, so that a chunk
 * kept in memory never pins the whole span.
 *
 * @example
 *   const decoder = new BlobDecoder((pack, offset, length) => store.get(pack, { offset, length }));
 *   const raw = await decoder.read(loc);
 */
export class BlobDecoder {
  /**
   * @param readRange how blobs are read (ranged reads of packs).
   * @param hooks refetches and integrity errors, as they happen (for counters and events).
   */
  constructor(
    private readonly readRange: PackRangeRead,
    private readonly hooks: BlobDecoderHooks = {},
  ) {}

  /**
   * The raw bytes of the blob at `loc`, decoded from `span` (bytes of its pack read from byte
   * `spanStart`), verified. When they fail verification (or the span holds less than the
   * blob), the blob is read again on its own: the result is then a Promise.
   * @returns the bytes (no Promise on the happy path), or a Promise of them after a refetch.
   * @throws (synchronously) decodeBlob's errors other than bad bytes; the Promise rejects
   *   E_INTEGRITY when the refetch fails verification too, or with the read's error.
   */
  fromSpan(span: Buffer, spanStart: number, loc: BlobLocation): Buffer | Promise<Buffer> {
    const from = loc.offset - spanStart;
    let raw: Buffer;
    try {
      raw = decodeBlob(span.subarray(from, from + loc.storedLength), loc);
    } catch (err) {
      if (!isBadBytes(err)) throw err;
      this.hooks.refetch?.(loc, err);
      return this.refetch(loc);
    }
    // Do not let a chunk kept in memory pin the whole span.
    if (loc.codec === 'none' && raw.length < span.length) raw = Buffer.from(raw);
    return raw;
  }

  /**
   * The raw bytes of one blob, read on its own and verified (refetched once when it fails).
   * @throws (rejects) E_INTEGRITY when it fails verification twice; the read's errors as they are.
   */
  async read(loc: BlobLocation): Promise<Buffer> {
    return this.fromSpan(await this.readRange(loc.pack, loc.offset, loc.storedLength, false), loc.offset, loc);
  }

  /**
   * Reads one blob again on its own (`refetch` read) and verifies it.
   * @throws (rejects) E_INTEGRITY when it fails verification again (details: digest, pack, offset).
   */
  async refetch(loc: BlobLocation): Promise<Buffer> {
    const stored = await this.readRange(loc.pack, loc.offset, loc.storedLength, true);
    try {
      return decodeBlob(stored, loc);
    } catch (err) {
      if (!isBadBytes(err)) throw err;
      this.hooks.integrityError?.(loc, err);
      throw new AwcError('E_INTEGRITY', `chunk ${loc.digest} in ${loc.pack} failed verification twice: ${(err as Error).message}`, {
        cause: err,
        details: { digest: loc.digest, pack: loc.pack, offset: loc.offset },
      });
    }
  }

  /**
   * `b` when it is `ref.size` bytes long.
   * @throws E_INTEGRITY otherwise (see {@link BlobDecoder.sizeError}).
   */
  static checkSize(b: Buffer, ref: ChunkRef): Buffer {
    if (b.length !== ref.size) throw BlobDecoder.sizeError(b, ref);
    return b;
  }

  /** The E_INTEGRITY error of a chunk whose raw bytes are not as long as the file lists (details: digest). */
  static sizeError(b: Buffer, ref: ChunkRef): AwcError {
    return new AwcError('E_INTEGRITY', `chunk ${ref.digest} has ${b.length} bytes, the file lists ${ref.size}`, {
      details: { digest: ref.digest },
    });
  }
}

/** True for the errors worth one refetch: bytes that failed verification, or a short read. */
function isBadBytes(err: unknown): boolean {
  return err instanceof AwcError && (err.code === 'E_INTEGRITY' || err.code === 'E_FORMAT');
}
