/** Shared fixtures of the read-path tests (chunk cache, fetcher, read-ahead, content source): real ContentWriter packs in a real FsObjectStore. */
import { randomBytes } from 'node:crypto';
import { readdirSync, statSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Digest } from '../../src/core/digest.js';
import type { ChunkRef } from '../../src/core/tree.js';
import { CachedContentSource, type LayerContents } from '../../src/host/read-path/cached-content-source.js';
import { ChunkCache } from '../../src/host/read-path/chunk-cache.js';
import { ChunkFetcher } from '../../src/host/read-path/chunk-fetcher.js';
import { ContentWriter, type FileContent } from '../../src/store/content/content-writer.js';
import { FsObjectStore } from '../../src/store/fs/fs-object-store.js';
import { MemoryBlobIndex } from '../../src/store/pack/memory-blob-index.js';
import type { ObjectStore } from '../../src/store/object/object-store.js';
import type { BlobLocation, WrittenPack } from '../../src/store/pack/pack-types.js';
import { CountingStore } from './counting-store.js';

export const MiB = 1024 * 1024;

export function code(err: unknown): string | undefined {
  return (err as { code?: string }).code;
}

export async function tmp(t: { after(fn: () => Promise<void>): void }): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'awc-cache-'));
  t.after(() => rm(dir, { recursive: true, force: true, maxRetries: 5 })); // retried: a write-behind may still land a file
  return dir;
}

export interface Fixture {
  dir: string;
  fsStore: FsObjectStore;
  store: CountingStore;
  index: MemoryBlobIndex;
  packs: WrittenPack[];
  files: { data: Buffer; fc: FileContent; hex: string }[];
  contents: LayerContents;
}

/**
 * Writes `count` files with the real ContentWriter into a real FsObjectStore (packs of
 * `packBytes`), and records their blobs in a MemoryBlobIndex. Files alternate between
 * incompressible data (codec none) and compressible text (lz4), small (one chunk) and large
 * (several chunks).
 */
export async function fixture(dir: string, opts: { count: number; packBytes: number; sizes?: (i: number) => number }): Promise<Fixture> {
  const fsStore = new FsObjectStore(join(dir, 'objects'));
  const index = new MemoryBlobIndex();
  const writer = new ContentWriter({ store: fsStore, index, packBytes: opts.packBytes });
  const sizes = opts.sizes ?? ((i: number) => (i % 3 === 0 ? 600_000 + i * 7919 : 1000 + i * 1543));
  const files: Fixture['files'] = [];
  for (let i = 0; i < opts.count; i++) {
    const n = sizes(i);
    let data: Buffer;
    if (i % 4 !== 1) {
      data = randomBytes(n);
    } else {
      const line = Buffer.from(`line ${i} of a compressible file ${randomBytes(4).toString('hex')}\n`);
      data = Buffer.alloc(n);
      for (let at = 0; at < n; at += line.length) line.copy(data, at);
      data[n >> 1] ^= 1;
    }
    const fc = await writer.writeBuffer(data);
    files.push({ data, fc, hex: fc.digest.slice(7) });
  }
  const packs = await writer.flush();
  index.addPacks(packs);
  const contents: LayerContents = {};
  for (const f of files) contents[f.hex] = [f.fc.size, f.fc.chunks.map((c) => [c.digest, c.size])];
  return { dir, fsStore, store: new CountingStore(fsStore), index, packs, files, contents };
}

/** A fresh (cold) cache, fetcher and source over a fixture's store. */
export async function stack(fx: Fixture, cacheDir: string, budgetBytes = 1 << 30, store: ObjectStore = fx.store) {
  const cache = new ChunkCache({ dir: cacheDir, budgetBytes });
  await cache.open();
  const fetcher = new ChunkFetcher({ store, cache });
  const source = new CachedContentSource(fetcher);
  source.register(fx.contents, fx.index);
  return { cache, fetcher, source };
}

/**
 * Expected number of ranged reads for a set of blobs, computed from the pack index alone:
 * per pack, blobs by offset, a new read whenever the gap exceeds 128 KiB or the span would
 * exceed 8 MiB.
 */
export function expectedRanges(locs: BlobLocation[], maxMerge = 8 * MiB, maxGap = 128 * 1024): number {
  const byPack = new Map<string, BlobLocation[]>();
  for (const l of locs) byPack.set(l.pack, [...(byPack.get(l.pack) ?? []), l]);
  let n = 0;
  for (const list of byPack.values()) {
    list.sort((a, b) => a.offset - b.offset);
    let start = -1;
    let end = -1;
    for (const l of list) {
      const e = l.offset + l.storedLength;
      if (start >= 0 && l.offset - end <= maxGap && Math.max(end, e) - start <= maxMerge) {
        end = Math.max(end, e);
      } else {
        n++;
        start = l.offset;
        end = e;
      }
    }
  }
  return n;
}

export function distinctLocs(fx: Fixture, refs: readonly ChunkRef[]): BlobLocation[] {
  const m = new Map<Digest, BlobLocation>();
  for (const r of refs) m.set(r.digest, fx.index.get(r.digest)!);
  return [...m.values()];
}

export function shuffled<T>(xs: readonly T[]): T[] {
  const a = xs.slice();
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

/** Sum of the sizes of every file under `dir` (chunk files and temporary files). */
export function diskBytes(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) n += diskBytes(p);
    else if (e.isFile()) {
      try {
        n += statSync(p).size;
      } catch {
        // unlinked meanwhile
      }
    }
  }
  return n;
}

export async function readWhole(source: CachedContentSource, hex: string, size: number): Promise<Buffer> {
  return await source.read(hex, 0, size);
}

/** A fresh (cold) cache, fetcher and source over a fixture's store, with read-ahead. */
export async function aheadStack(
  fx: Fixture,
  cacheDir: string,
  opts: { readAheadBytes: number; readAheadMinBytes?: number; memoryBytes?: number; budgetBytes?: number },
) {
  const cache = new ChunkCache({ dir: cacheDir, budgetBytes: opts.budgetBytes ?? 1 << 30, memoryBytes: opts.memoryBytes });
  await cache.open();
  const fetcher = new ChunkFetcher({
    store: fx.store,
    cache,
    readAheadBytes: opts.readAheadBytes,
    readAheadMinBytes: opts.readAheadMinBytes,
  });
  const source = new CachedContentSource(fetcher);
  source.register(fx.contents, fx.index);
  return { cache, fetcher, source };
}

/**
 * The backend reads a cold, sequential read of every blob of one pack (in offset order, each
 * blob asked for once the previous one was served) costs with read-ahead, worked out from the
 * pack layout alone by the documented rules: the first window of a pack is read before its
 * index is known ([first blob, +min) — blob boundaries ignored) and, once it is, ends at its
 * last whole blob; when that read does not reach the end of the pack, one more read fetches its
 * tail (the index; the first guess is enough here);
 * each later window holds whole blobs from the first one it lacks up to the stream's size,
 * which starts at `min` and doubles (up to `max`) while a window starts where the last one
 * ended. A window whose second half holds a chunk read ahead (and that is not the last) has
 * the next one read in the background (`async`) when the reader gets there; otherwise the
 * next miss starts it.
 */
export function expectedAheadReads(pack: WrittenPack, min: number, max: number): { windows: number; indexReads: number; async: number } {
  const blobs = pack.blobs.slice().sort((a, b) => a.offset - b.offset);
  const endOf = (b: BlobLocation) => b.offset + b.storedLength;
  let windows = 0;
  let async = 0;
  let indexReads = 0;
  let i = 0; // first blob not read yet
  let next = -1; // where the last window ended
  let size = min;
  let asked = true; // the window starts at a blob asked for (a miss), else it was started in the background
  while (i < blobs.length) {
    const start = blobs[i].offset;
    let end: number;
    if (windows === 0) {
      end = Math.min(start + Math.max(min, blobs[0].storedLength), pack.size);
      if (end < pack.size) indexReads = 1;
    } else {
      size = start >= next && start - next <= 128 * 1024 ? Math.min(max, size * 2) : min;
      end = endOf(blobs[i]);
      for (let j = i + 1; j < blobs.length && endOf(blobs[j]) - start <= size; j++) end = endOf(blobs[j]);
    }
    windows++;
    const middle = start + ((end - start) >> 1);
    let j = i;
    let trigger = false;
    for (; j < blobs.length && endOf(blobs[j]) <= end; j++) if (!(asked && j === i) && blobs[j].offset >= middle) trigger = true;
    if (trigger && j < blobs.length) async++;
    asked = !(trigger && j < blobs.length);
    next = j < blobs.length ? Math.min(end, blobs[j].offset) : end;
    i = j;
  }
  return { windows, indexReads, async };
}

/** Files of a fixture in pack order (by the offset of their first chunk). */
export function inPackOrder(fx: Fixture): Fixture['files'] {
  return fx.files.slice().sort((a, b) => fx.index.get(a.fc.chunks[0].digest)!.offset - fx.index.get(b.fc.chunks[0].digest)!.offset);
}
