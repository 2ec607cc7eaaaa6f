/**
 * Issue 26: the hash workers (src/store/content/hash-pool.ts) read, chunk, hash and encode
 * files off the main thread. What an import records must not depend on them: the same root
 * digest, entries, counts, stats and git proof with the pool forced on (from the first file)
 * and off, over a real tree with multi-batch files, small files, a sparse file, hardlinks,
 * empty files and a git repository; what they stored reads back byte for byte; and a file
 * that changes while a worker reads it still ends in E_CHANGED_DURING_READ.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import {
  appendFileSync,
  closeSync,
  ftruncateSync,
  linkSync,
  mkdirSync,
  openSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { sha256, type Digest } from '../../../src/core/digest.js';
import type { Entry } from '../../../src/core/tree.js';
import { importDir, type ImportResult } from '../../../src/host/tree/import-dir.js';
import { ContentReader } from '../../../src/store/content/content-reader.js';
import { ContentWriter, type ContentWriterOptions } from '../../../src/store/content/content-writer.js';
import { FsObjectStore } from '../../../src/store/fs/fs-object-store.js';
import { HashPool } from '../../../src/store/content/hash-pool.js';
import { MemoryBlobIndex } from '../../../src/store/pack/memory-blob-index.js';
import { errorCode } from '../../helpers/assert-errors.js';
import { tempDirFor } from '../../helpers/temp-dir.js';

const ON = { afterFiles: 0, afterBytes: 0 } as const;

/** The fixture: a git repository holding every kind of file the workers read. */
function makeTree(root: string): { sparse: string } {
  mkdirSync(join(root, 'big'), { recursive: true });
  mkdirSync(join(root, 'small', 'deep'), { recursive: true });
  const block = randomBytes(1_000_000);
  // 9.5 MB: three reads of 4 MiB (several batches, acknowledged), random, repeated and compressible stretches
  writeFileSync(
    join(root, 'big', 'mixed.bin'),
    Buffer.concat([randomBytes(3_000_000), block, Buffer.from('text line\n'.repeat(300_000)), block, randomBytes(500_000)]),
  );
  writeFileSync(join(root, 'big', 'random.bin'), randomBytes(1_200_000)); // one read, several chunks
  writeFileSync(join(root, 'big', 'text.txt'), 'all work and no play\n'.repeat(100_000)); // compresses
  writeFileSync(join(root, 'big', 'exact.bin'), randomBytes(4 * 1024 * 1024)); // exactly one read size
  for (let i = 0; i < 40; i++) writeFileSync(join(root, 'small', `f${i}.txt`), `file ${i}\n`.repeat(i * 7));
  writeFileSync(join(root, 'small', 'deep', 'dup.txt'), 'file 3\n'.repeat(21)); // the same content as f3.txt
  writeFileSync(join(root, 'empty'), '');
  writeFileSync(join(root, 'small', 'empty2'), '');
  linkSync(join(root, 'big', 'random.bin'), join(root, 'small', 'link-to-random'));
  linkSync(join(root, 'small', 'f5.txt'), join(root, 'z-link'));
  symlinkSync('big/text.txt', join(root, 'sym'));
  // sparse: 64 MiB with data at 0, 20 MiB (crossing a read) and its end
  const sparse = join(root, 'sparse.img');
  const fd = openSync(sparse, 'w');
  try {
    ftruncateSync(fd, 64 * 1024 * 1024);
    writeSync(fd, randomBytes(100_000), 0, 100_000, 0);
    writeSync(fd, randomBytes(5_000_000), 0, 5_000_000, 20 * 1024 * 1024);
    writeSync(fd, Buffer.from('end'), 0, 3, 64 * 1024 * 1024 - 3);
  } finally {
    closeSync(fd);
  }
  const git = (...args: string[]) =>
    execFileSync('git', ['-C', root, '-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { stdio: 'pipe' });
  git('init', '-q');
  git('add', 'small', 'big/text.txt', 'big/random.bin', 'empty');
  git('commit', '-qm', 'fixture');
  return { sparse };
}

async function importWith(dir: string, src: string, name: string, hashWorkers: ContentWriterOptions['hashWorkers']) {
  const store = new FsObjectStore(join(dir, `objects-${name}`));
  const index = new MemoryBlobIndex();
  const writer = new ContentWriter({ store, index, hashWorkers });
  const progress: number[] = [];
  const r = await importDir(src, writer, { gitProof: true, onProgress: (p) => progress.push(p.files) });
  const packs = await writer.flush();
  await index.add(packs.flatMap((p) => p.blobs));
  return { r, writer, store, index, progress };
}

/** Every entry of the snapshot by path, and each file's content read back from the store. */
async function readBack(reader: ContentReader, tree: Digest, prefix = '', out = new Map<string, Entry>()): Promise<Map<string, Entry>> {
  for (const e of (await reader.readTree(tree)).entries) {
    const p = prefix + e.name;
    out.set(p, e);
    if (e.type === 'dir') await readBack(reader, e.tree, `${p}/`, out);
  }
  return out;
}

async function collect(it: AsyncIterable<Buffer>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const b of it) parts.push(b);
  return Buffer.concat(parts);
}

function sameResult(a: ImportResult, b: ImportResult): void {
  assert.equal(a.root, b.root);
  assert.equal(a.fileCount, b.fileCount);
  assert.equal(a.byteCount, b.byteCount);
  assert.deepEqual(a.gitProof, b.gitProof);
  assert.deepEqual(a.skipped, b.skipped);
}

test('hash workers on and off: the same root, entries, stats and git proof; what they stored reads back', async (t) => {
  const dir = await tempDirFor(t, 'awc-hashw-');
  const src = join(dir, 'src');
  mkdirSync(src);
  const { sparse } = makeTree(src);
  assert.ok(statSync(sparse).blocks * 512 < 16 * 1024 * 1024, 'the file system keeps the fixture sparse');
  // Counts the files the workers read (the pool's own method, counted, not replaced).
  const run = HashPool.prototype.run;
  let jobs = 0;
  HashPool.prototype.run = function (this: HashPool, ...args: Parameters<HashPool['run']>) {
    jobs++;
    return run.apply(this, args);
  };
  t.after(() => {
    HashPool.prototype.run = run;
  });
  const off = await importWith(dir, src, 'off', false);
  assert.equal(jobs, 0, 'no worker read with the pool off');
  const on = await importWith(dir, src, 'on', { ...ON, threads: 2 });
  assert.ok(jobs >= on.r.fileCount, `every file read by a worker (${jobs} jobs, ${on.r.fileCount} files)`);
  sameResult(off.r, on.r);
  assert.ok(on.r.gitProof, 'the git proof was computed');
  assert.ok(off.r.fileCount > 48, `${off.r.fileCount} files`); // 4 big, 41 small, 2 empty, the sparse one, and .git's
  assert.deepEqual(on.progress, off.progress);
  const { storedBytes: _a, packs: _b, ...offStats } = off.writer.stats;
  const { storedBytes: _c, packs: _d, ...onStats } = on.writer.stats;
  assert.deepEqual(onStats, offStats);
  const reader = new ContentReader({ store: on.store, index: on.index });
  const entries = await readBack(reader, (await reader.readRoot(on.r.root)).tree);
  assert.equal(entries.get('small/link-to-random')?.type, 'hardlink');
  assert.equal(entries.get('z-link')?.type, 'hardlink');
  const sp = entries.get('sparse.img');
  assert.ok(sp?.type === 'file' && sp.extents && sp.extents.length === 3, `sparse.img recorded with its extents: ${JSON.stringify(sp)}`);
  for (const [p, e] of entries) {
    if (e.type !== 'file' || p.startsWith('.git/')) continue;
    assert.ok((await collect(reader.readFile(e))).equals(readFileSync(join(src, p))), `${p} reads back`);
  }
  const mixed = entries.get('big/mixed.bin');
  assert.ok(mixed?.type === 'file' && mixed.chunks.length > 40, 'the big file has many chunks');
});

test('hash workers in a dry run that keeps chunks: the same stats, every new chunk kept', async (t) => {
  const dir = await tempDirFor(t, 'awc-hashw-');
  const src = join(dir, 'src');
  mkdirSync(src);
  makeTree(src);
  const run = async (hashWorkers: ContentWriterOptions['hashWorkers'], keepChunks: boolean) => {
    const writer = new ContentWriter({
      store: new FsObjectStore(join(dir, 'none')),
      index: new MemoryBlobIndex(),
      dryRun: true,
      keepChunks,
      hashWorkers,
    });
    const r = await importDir(src, writer);
    return { r, writer };
  };
  const off = await run(false, true);
  for (const keep of [true, false]) {
    const on = await run(ON, keep);
    sameResult(off.r, on.r);
    assert.deepEqual(on.writer.stats, off.writer.stats);
    assert.equal(on.writer.stats.storedBytes, 0);
  }
  const on = await run(ON, true);
  const reader = new ContentReader({
    store: new FsObjectStore(join(dir, 'none')),
    index: new MemoryBlobIndex(),
    extra: (d) => on.writer.sessionBlob(d),
  });
  const entries = await readBack(reader, (await reader.readRoot(on.r.root)).tree);
  const f = entries.get('big/mixed.bin');
  assert.ok(f?.type === 'file');
  assert.ok((await collect(reader.readFile(f))).equals(readFileSync(join(src, 'big/mixed.bin'))), 'kept chunks read back');
});

test('hash workers: a file that changes while read → E_CHANGED_DURING_READ (path relative to the import); once → the new content', async (t) => {
  const dir = await tempDirFor(t, 'awc-hashw-');
  for (const size of [1000, 9_000_000]) {
    const src = join(dir, `src-${size}`);
    mkdirSync(join(src, 'd'), { recursive: true });
    const path = join(src, 'd', 'grow.bin');
    writeFileSync(path, randomBytes(size));
    const always = new ContentWriter({
      store: new FsObjectStore(join(dir, 'o1')),
      index: new MemoryBlobIndex(),
      hashWorkers: ON,
      testHooks: { afterRead: () => appendFileSync(path, 'more') },
    });
    await assert.rejects(importDir(src, always), (e) => {
      assert.equal(errorCode(e), 'E_CHANGED_DURING_READ');
      assert.equal((e as { retryable: boolean }).retryable, true);
      assert.equal((e as { details?: { path?: string } }).details?.path, 'd/grow.bin');
      return true;
    });
    const once = new ContentWriter({
      store: new FsObjectStore(join(dir, 'o2')),
      index: new MemoryBlobIndex(),
      hashWorkers: ON,
      testHooks: { afterRead: (_p, attempt) => (attempt === 0 ? appendFileSync(path, 'tail') : undefined) },
    });
    const f = await once.writeFile(path);
    const now = readFileSync(path);
    assert.equal(f.size, now.length);
    assert.equal(f.digest, sha256(now));
  }
});

test('hash pool: a read error comes back with its errno code, and the pool goes on', async () => {
  const pool = new HashPool(1);
  try {
    const fd = openSync('/dev/null', 'r');
    closeSync(fd); // a descriptor number no longer open
    await assert.rejects(
      pool.run({ fd: 1 << 20, size: 10, mode: 'compress' }, async () => undefined),
      (e) => (e as NodeJS.ErrnoException).code === 'EBADF',
    );
    const zero = openSync('/dev/zero', 'r');
    try {
      let got = 0;
      const r = await pool.run({ fd: zero, size: 100_000, mode: 'raw' }, async (b) => {
        got += b.reduce((a, c) => a + c.stored.length, 0);
      });
      assert.equal(r.size, 100_001, 'a file read one byte past its size notices growth');
      assert.equal(got, 100_001);
    } finally {
      closeSync(zero);
    }
  } finally {
    await pool.close();
  }
});
