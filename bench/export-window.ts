#!/usr/bin/env node
/**
 * Export of a snapshot of many small files with an empty cache: the read window of exports
 * (src/store/content/read-window.ts) against the old path (each file read on its own, `readWindow:
 * false`), side by side in one run, from a bucket on s3rver (scripts/s3-server.mjs, loopback),
 * from the same bucket with 20 ms added to every GET (what a bucket in another building
 * costs per request), and from a directory store.
 *
 *   node dist/bench/export-window.js [--files N] [--tree DIR] [--iters N] [--no-write]
 *
 * The tree: DIR (e.g. this checkout's node_modules), else a synthetic one of N files
 * (default 10 000; sizes as in node_modules: mostly 0.2–8 KiB, some to 64 KiB, 20 files a
 * directory), snapshotted once per store (ContentWriter, 32 MiB packs, a memory blob index).
 * Each export is a new ContentReader (nothing cached), `exportDir` into a fresh directory and
 * `exportTar` into a file; the median of `iters` (default 3) runs, old and new interleaved.
 * GETs are counted by a wrapper around the real store. Writes bench/EXPORT-WINDOW.md and its
 * section of docs/benchmarks.md (unless --no-write); a full `npm run bench` keeps the section.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CreateBucketCommand } from '@aws-sdk/client-s3';
import type { Digest } from '../src/core/digest.js';
import { exportDir } from '../src/host/tree/export-dir.js';
import { importDir } from '../src/host/tree/import-dir.js';
import { exportTar } from '../src/service/tar/export-tar.js';
import { ContentReader } from '../src/store/content/content-reader.js';
import { ContentWriter } from '../src/store/content/content-writer.js';
import { FsObjectStore } from '../src/store/fs/fs-object-store.js';
import { MemoryBlobIndex } from '../src/store/pack/memory-blob-index.js';
import type { ObjectStore } from '../src/store/object/object-store.js';
import { S3ObjectStore } from '../src/store/s3/s3-object-store.js';
import { CountingStore } from '../test/helpers/counting-store.js';
import { S3_TEST_CREDENTIALS, startS3Server, testS3Client } from '../test/helpers/s3.js';
import { replaceDocSection } from './doc-section.js';
import { fmtBytes, median, now, treeStats } from './util.js';

/** Where the section is kept. */
export const EXPORT_WINDOW_FILE = 'EXPORT-WINDOW.md';
const BEGIN = '<!-- export-window:begin (bench/export-window.ts writes this section; bench/EXPORT-WINDOW.md keeps it) -->';
const END = '<!-- export-window:end -->';

/** The kept section with its markers, for report.ts. */
export function exportWindowSection(text: string): string {
  return `${BEGIN}\n${text.trim()}\n${END}`;
}

/** A synthetic tree of `files` small files, 20 a directory, two levels deep. */
function syntheticTree(dir: string, files: number): void {
  for (let i = 0; i < files; i++) {
    const d = join(dir, `pkg-${Math.floor(i / 200)}`, `dir-${Math.floor(i / 20) % 10}`);
    if (i % 20 === 0) mkdirSync(d, { recursive: true });
    const r = (i * 2654435761) % 1000;
    const size = r < 900 ? 200 + ((r * 8) % 8000) : 8192 + r * 56;
    const text = i % 3 !== 0;
    const body = text
      ? Buffer.from(`// file ${i}\n${'export const value = 42; // some code\n'.repeat(Math.ceil(size / 40))}`.slice(0, size))
      : randomBytes(size);
    writeFileSync(join(d, `f${i}.js`), body);
  }
}

interface Row {
  store: string;
  format: 'dir' | 'tar';
  path: 'old' | 'window';
  ms: number;
  gets: number;
}

async function measure(
  store: string,
  backend: ObjectStore,
  index: MemoryBlobIndex,
  root: Digest,
  work: string,
  iters: number,
  delayMs: number,
): Promise<Row[]> {
  const rows: Row[] = [];
  for (const format of ['dir', 'tar'] as const) {
    const t: Record<'old' | 'window', { ms: number[]; gets: number[] }> = { old: { ms: [], gets: [] }, window: { ms: [], gets: [] } };
    for (let i = 0; i < iters; i++) {
      for (const path of ['old', 'window'] as const) {
        const counted = new CountingStore(backend);
        if (delayMs > 0) counted.delay = () => delayMs;
        const reader = new ContentReader({ store: counted, index });
        const out = join(work, `${format}-${path}-${i}`);
        const readWindow = path === 'old' ? false : undefined;
        const t0 = now();
        if (format === 'dir') await exportDir(reader, root, out, { readWindow });
        else await exportTar(reader, root, `${out}.tar`, { readWindow });
        t[path].ms.push(now() - t0);
        t[path].gets.push(counted.gets);
        rmSync(format === 'dir' ? out : `${out}.tar`, { recursive: true, force: true });
      }
    }
    for (const path of ['old', 'window'] as const) rows.push({ store, format, path, ms: median(t[path].ms), gets: median(t[path].gets) });
  }
  return rows;
}

async function snapshot(src: string, store: ObjectStore): Promise<{ index: MemoryBlobIndex; root: Digest; packs: number }> {
  const index = new MemoryBlobIndex();
  const w = new ContentWriter({ store, index });
  const { root } = await importDir(src, w);
  const packs = await w.flush();
  index.addPacks(packs);
  return { index, root, packs: packs.length };
}

/** Runs the comparison; returns the markdown of the section. */
export async function runExportWindow(o: { files: number; tree?: string; iters: number; log: (s: string) => void }): Promise<string> {
  const work = mkdtempSync(join(tmpdir(), 'awc-bench-export-'));
  const server = await startS3Server();
  try {
    let src = o.tree;
    if (!src) {
      src = join(work, 'src');
      syntheticTree(src, o.files);
    }
    const st = treeStats(src);
    o.log(`export-window: ${st.files} files, ${fmtBytes(st.bytes)} in ${st.dirs} directories`);
    const fsStore = new FsObjectStore(join(work, 'objects'));
    const bucket = `awc-bench-${randomBytes(4).toString('hex')}`;
    const client = testS3Client(server.endpoint);
    await client.send(new CreateBucketCommand({ Bucket: bucket }));
    client.destroy();
    const s3 = new S3ObjectStore({
      bucket,
      prefix: 'awc/',
      endpoint: server.endpoint,
      forcePathStyle: true,
      credentials: S3_TEST_CREDENTIALS,
    });
    const fsSnap = await snapshot(src, fsStore);
    const s3Snap = await snapshot(src, s3);
    const rows: Row[] = [];
    const stores: [string, ObjectStore, typeof fsSnap, number][] = [
      ['s3rver (loopback)', s3, s3Snap, 0],
      ['s3rver + 20 ms a GET', s3, s3Snap, 20],
      ['directory store', fsStore, fsSnap, 0],
    ];
    for (const [name, store, snap, delay] of stores) {
      o.log(`export-window: ${name}`);
      // the slow bucket once: its old path alone is 20 ms × one GET per file
      rows.push(...(await measure(name, store, snap.index, snap.root, work, delay > 0 ? 1 : o.iters, delay)));
    }
    const lines = [
      `## Export with an empty cache: the read window`,
      '',
      `Generated by \`npm run bench:export\` (bench/export-window.ts) on ${new Date().toISOString().slice(0, 10)}: ` +
        `${o.tree ? `the tree ${o.tree}` : 'a synthetic tree'} of ${st.files} files (${fmtBytes(st.bytes)}, ${st.dirs} directories, ` +
        `${s3Snap.packs} packs), exported by \`exportDir\` and \`exportTar\` with a new ContentReader each time (nothing cached), ` +
        `the old path (each file read on its own: \`readWindow: false\`) against the read window (8 GETs in flight, ≤ 8 MiB a GET, ` +
        `≤ 64 MiB held), median of ${o.iters} interleaved runs. "+ 20 ms a GET": the same bucket with 20 ms added to every GET ` +
        `(a bucket across a network; one run each). GETs counted by a wrapper around the store. Load average ${loadavg()[0].toFixed(1)} on this ` +
        'machine at the end (shared with other work: read the times relative to each other).',
      '',
      '| store | format | old path | window | speed-up | GETs old → window |',
      '|---|---|---:|---:|---:|---:|',
    ];
    for (let i = 0; i < rows.length; i += 2) {
      const [a, b] = [rows[i], rows[i + 1]];
      lines.push(
        `| ${a.store} | ${a.format} | ${(a.ms / 1000).toFixed(2)} s | ${(b.ms / 1000).toFixed(2)} s | ${(a.ms / b.ms).toFixed(1)}× | ${a.gets} → ${b.gets} |`,
      );
    }
    return lines.join('\n');
  } finally {
    await server.stop();
    rmSync(work, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const arg = (flag: string) => {
    const i = argv.indexOf(flag);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const num = (flag: string, d: number) => {
    const v = Number(arg(flag) ?? d);
    if (!Number.isInteger(v) || v < 1 || v > 1_000_000) throw new Error(`${flag} takes an integer from 1 to 1000000`);
    return v;
  };
  const text = await runExportWindow({
    files: num('--files', 10_000),
    tree: arg('--tree'),
    iters: num('--iters', 3),
    log: (s) => process.stderr.write(s + '\n'),
  });
  process.stdout.write(text + '\n');
  if (!argv.includes('--no-write')) replaceDocSection(EXPORT_WINDOW_FILE, BEGIN, END, text);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  main().catch((err) => {
    process.stderr.write(`export-window: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exit(1);
  });
}
