/**
 * Incremental directory imports through the stat cache (src/service/import/stat-cache.ts;
 * docs/explanation/incremental-prepare.md), on real files with SQLite and PostgreSQL catalogs:
 * an import with a parent and a stat cache gives a root byte-identical to a full re-import for
 * random change sets (modify, add, delete, rename, chmod, a same-size rewrite with the mtime
 * put back, caught by its ctime), reads only what changed, never trusts a cache of another
 * snapshot or source or one that does not check out (a full import, no crash), applies the
 * racy-timestamp rule, and leaves a file that kept changing while read out of the cache.
 */
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { readdirSync, appendFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Awc } from '../../../src/service/workspace/awc.js';
import { importSnapshot } from '../../../src/service/import/import-snapshot.js';
import { ContentWriter } from '../../../src/store/content/content-writer.js';
import { LoadedStatCache, StatCacheRecorder, statCachePath, RACY_MARGIN_MS } from '../../../src/service/import/stat-cache.js';
import { freshDatabase, type FreshDatabase } from '../../helpers/postgres.js';
import { sha256 } from '../../../src/core/digest.js';

/** Every directory under `dir`, itself included ('' for it). */
function dirsOf(dir: string, rel = ''): string[] {
  const out = [rel];
  for (const d of readdirSync(join(dir, rel), { withFileTypes: true }))
    if (d.isDirectory()) out.push(...dirsOf(dir, rel ? `${rel}/${d.name}` : d.name));
  return out;
}

/** A small deterministic PRNG (mulberry32). */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Every regular file under `dir` (slash paths from it). */
function filesOf(dir: string, rel = ''): string[] {
  const out: string[] = [];
  for (const d of readdirSync(join(dir, rel), { withFileTypes: true })) {
    const r = rel ? `${rel}/${d.name}` : d.name;
    if (d.isDirectory()) out.push(...filesOf(dir, r));
    else if (d.isFile()) out.push(r);
  }
  return out.sort();
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Rewrites `p` with other bytes of the same size and puts its atime and mtime back to the nanosecond (`touch -r`): only its ctime moves. */
function rewriteKeepingTimes(p: string, ref: string): void {
  execFileSync('touch', ['-r', p, ref]);
  const old = readFileSync(p);
  writeFileSync(p, old.length ? Buffer.from(old.map((b, i) => (i === 0 ? b ^ 1 : b))) : 'x');
  if (old.length) execFileSync('touch', ['-r', ref, p]);
}

/** One random change to the tree at `dir`; returns what it did (for messages). */
function change(dir: string, next: () => number, n: number): string {
  const files = filesOf(dir);
  const pick = () => files[Math.floor(next() * files.length)]!;
  const kind = Math.floor(next() * 7);
  const f = pick();
  const p = join(dir, f);
  switch (kind) {
    case 0:
      appendFileSync(p, `more ${n}\n`);
      return `modify ${f}`;
    case 1: {
      const np = join(dir, `d${n % 3}`, `new-${n}.txt`);
      mkdirSync(dirname(np), { recursive: true });
      writeFileSync(np, `added ${n}\n`);
      return `add ${np}`;
    }
    case 2:
      rmSync(p);
      return `delete ${f}`;
    case 3:
      renameSync(p, join(dir, `renamed-${n}.txt`));
      return `rename ${f}`;
    case 4:
      chmodSync(p, statSync(p).mode & 0o100 ? 0o644 : 0o755);
      return `chmod ${f}`;
    default: {
      // same size, other bytes, mtime put back: only the ctime tells
      rewriteKeepingTimes(p, join(dirname(dir), 'times-ref'));
      return `same-size rewrite ${f}`;
    }
  }
}

/** A tree of `files` small files in a few directories, plus a larger multi-chunk file. */
function makeTree(dir: string, files: number): void {
  for (let i = 0; i < files; i++) {
    const p = join(dir, `d${i % 5}`, `s${i % 3}`, `f${i}.txt`);
    mkdirSync(dirname(p), { recursive: true });
    writeFileSync(p, `file ${i}\n`.repeat(1 + (i % 7)));
  }
  const big = Buffer.alloc(3 * 1024 * 1024);
  for (let i = 0; i < big.length; i += 4096) big.writeUInt32LE(Math.imul(i, 2654435761) >>> 0, i);
  writeFileSync(join(dir, 'big.bin'), big);
}

for (const backend of ['sqlite', 'postgres'] as const)
  describe(`incremental import through the stat cache (${backend})`, () => {
    let work: string;
    let svc: Awc;
    let db: FreshDatabase | undefined;
    let tree: string;

    before(async () => {
      work = mkdtempSync(join(tmpdir(), 'awc-incr-'));
      if (backend === 'postgres') db = await freshDatabase();
      svc = await Awc.open({ home: join(work, 'home'), mountDriver: 'copy', catalog: db?.url });
      tree = join(work, 'tree');
      makeTree(tree, 240);
      // past the racy margin: the files written above are trusted by the next import
      await sleep(RACY_MARGIN_MS + 200);
    });
    after(async () => {
      await svc.close();
      rmSync(work, { recursive: true, force: true });
      await db?.drop();
    });

    it('random change sets: each incremental root equals a full re-import, and only what changed is read', async () => {
      const first = await svc.importSnapshot(tree, { statCache: true });
      assert.deepEqual(first.statCache, { reused: 0, read: filesOf(tree).length, miss: 'no-parent' });
      let parent = first;
      const next = rng(backend === 'sqlite' ? 7 : 11);
      for (let round = 0; round < 6; round++) {
        const did: string[] = [];
        for (let k = 0; k < 8; k++) did.push(change(tree, next, round * 100 + k));
        const inc = await svc.importSnapshot(tree, { statCache: true, parent: parent.id });
        const full = await svc.importSnapshot(tree, { message: 'full' });
        assert.equal(inc.root, full.root, `round ${round}: ${did.join('; ')}`);
        assert.equal(inc.parent, parent.id);
        const sc = inc.statCache!;
        assert.equal(sc.miss, undefined, 'the cache of the parent is used');
        assert.equal(sc.reused + sc.read, filesOf(tree).length, 'every file either reused or read');
        // unchanged old files are reused: at most the 8 changed ones plus the racy ones of earlier rounds are read
        assert.ok(sc.read <= 8 * (round + 1) + 1, `round ${round}: read ${sc.read} (${did.join('; ')})`);
        assert.ok(sc.reused >= filesOf(tree).length - 8 * (round + 1) - 1, `round ${round}: reused ${sc.reused}`);
        parent = inc;
      }
    });

    it('a same-size rewrite with its mtime put back is read again (its ctime moved)', async () => {
      const first = await svc.importSnapshot(tree, { statCache: true });
      await sleep(RACY_MARGIN_MS + 200);
      const base = await svc.importSnapshot(tree, { statCache: true, parent: first.id }); // every file now old: trusted
      const f = join(tree, 'd1', 's1', 'f1.txt');
      const st = statSync(f, { bigint: true });
      rewriteKeepingTimes(f, join(work, 'times-ref'));
      const now = statSync(f, { bigint: true });
      assert.equal(now.mtimeNs, st.mtimeNs);
      assert.equal(now.size, st.size);
      assert.notEqual(now.ctimeNs, st.ctimeNs);
      const inc = await svc.importSnapshot(tree, { statCache: true, parent: base.id });
      const full = await svc.importSnapshot(tree);
      assert.equal(inc.root, full.root);
      assert.notEqual(inc.root, base.root);
      assert.equal(inc.statCache!.read, 1, 'only the rewritten file is read');
    });

    it("directories (cache-tree): an unchanged one's tree is reused; a file changed in place (its directory's mtime unmoved) is read and its directories re-hashed", async () => {
      const first = await svc.importSnapshot(tree, { statCache: true });
      await sleep(RACY_MARGIN_MS + 200);
      const older = await svc.importSnapshot(tree, { statCache: true, parent: first.id }); // every file and directory now old: trusted
      const base = await svc.importSnapshot(tree, { statCache: true, parent: older.id });
      const dirs = dirsOf(tree);
      assert.deepEqual(base.statCache, { reused: filesOf(tree).length, read: 0, dirs: dirs.length }, 'nothing changed: every tree reused');
      assert.equal(base.root, first.root);
      // a file two levels down changed in place: its directory's times stay, its own stat moves
      const rel = filesOf(tree).find((f) => f.split('/').length === 3)!;
      const dir = join(tree, dirname(rel));
      const dirBefore = statSync(dir, { bigint: true });
      appendFileSync(join(tree, rel), 'changed in place\n');
      const dirAfter = statSync(dir, { bigint: true });
      assert.equal(dirAfter.mtimeNs, dirBefore.mtimeNs, "appending to a file does not move its directory's mtime");
      assert.equal(dirAfter.ctimeNs, dirBefore.ctimeNs);
      // and a directory elsewhere chmod-ed: its ctime moves, not its mtime
      const other = dirs.find((d) => d !== '' && !rel.startsWith(`${d}/`) && d.split('/').length === 1)!;
      chmodSync(join(tree, other), 0o750);
      const inc = await svc.importSnapshot(tree, { statCache: true, parent: base.id });
      const full = await svc.importSnapshot(tree, { message: 'full' });
      assert.equal(inc.root, full.root, 'the same root as a full import');
      assert.notEqual(inc.root, base.root);
      assert.equal(inc.statCache!.read, 1, 'only the changed file is read');
      // re-hashed: the file's two directories and the root, and the chmod-ed one (its subdirectories stay reused)
      assert.equal(inc.statCache!.dirs, dirs.length - 4, `${rel}, ${other}`);
      chmodSync(join(tree, other), 0o755);
    });

    it('is not trusted for another source path, another snapshot, or a cache file that does not check out', async () => {
      const first = await svc.importSnapshot(tree, { statCache: true });
      const other = join(work, 'copy');
      mkdirSync(other);
      writeFileSync(join(other, 'a.txt'), 'a\n');
      const o1 = await svc.importSnapshot(other, { statCache: true });
      // another source's snapshot as the parent: the cache of this path is bound to `first`, not to it
      const wrongParent = await svc.importSnapshot(tree, { statCache: true, parent: o1.id });
      assert.equal(wrongParent.statCache!.miss, 'other-snapshot');
      assert.equal(wrongParent.statCache!.reused, 0);
      // the cache of `tree` is now bound to wrongParent; ask with `first`: another snapshot
      const stale = await svc.importSnapshot(tree, { statCache: true, parent: first.id });
      assert.equal(stale.statCache!.miss, 'other-snapshot');
      // tampered: one byte of the body changed, then cut short, then garbage: a full import each time, same root
      const path = statCachePath(svc.statCacheDir(), { namespace: svc.namespace, source: tree });
      const good = readFileSync(path, 'utf8');
      const tampered = good.replace(/"sha256:[0-9a-f]/, (m) => m.slice(0, -1) + (m.endsWith('0') ? '1' : '0'));
      assert.notEqual(tampered, good);
      for (const bad of [tampered, good.slice(0, good.length >> 1), 'garbage', '']) {
        writeFileSync(path, bad);
        const r = await svc.importSnapshot(tree, { statCache: true, parent: stale.id });
        assert.equal(r.statCache!.miss, 'corrupt');
        assert.equal(r.statCache!.reused, 0);
        assert.equal(r.root, stale.root);
        writeFileSync(path, good);
      }
      assert.equal(statSync(path).mode & 0o777, 0o600);
      assert.equal(statSync(svc.statCacheDir()).mode & 0o777, 0o700);
    });

    it('racy timestamps: an entry whose mtime or ctime is not older than the import start minus the margin is not trusted', async () => {
      const dir = join(work, 'racy');
      mkdirSync(dir);
      const f = join(dir, 'fresh.txt');
      writeFileSync(f, 'fresh\n');
      const st = statSync(f, { bigint: true });
      const rec = new StatCacheRecorder();
      const entry = {
        type: 'file' as const,
        name: 'fresh.txt',
        mode: 0o644,
        uid: 0,
        gid: 0,
        mtimeNs: '0',
        size: 6,
        digest: sha256('fresh\n'),
        chunks: [{ digest: sha256('fresh\n'), size: 6 }],
      };
      rec.onFile({ rel: 'fresh.txt', st, entry });
      const cacheDir = join(work, 'racy-cache');
      const key = { namespace: 'ns', source: dir };
      const snap = { id: 'sn_x', root: sha256('root') };
      assert.equal(await rec.save(cacheDir, key, snap), undefined);
      const loaded = await LoadedStatCache.load(cacheDir, key, snap);
      assert.equal(loaded.miss, undefined);
      assert.equal(loaded.reuse('fresh.txt', st, false), undefined, 'written just before the import: racy');
      // a recorder started after the margin trusts it
      await sleep(RACY_MARGIN_MS + 200);
      const later = new StatCacheRecorder();
      later.onFile({ rel: 'fresh.txt', st, entry });
      await later.save(cacheDir, key, snap);
      const ok = await LoadedStatCache.load(cacheDir, key, snap);
      assert.equal(ok.reuse('fresh.txt', st, false)?.entry.type, 'file');
      assert.equal(ok.reuse('fresh.txt', st, true), undefined, 'no git blob id recorded: not reused when the proof wants one');
      assert.equal(ok.reuse('other.txt', st, false), undefined);
      assert.equal((await LoadedStatCache.load(cacheDir, { ...key, source: '/elsewhere' }, snap)).miss, 'none');
    });

    it("racy timestamps: a directory's record is trusted only when its lstat is the recorded one and older than the margin", async () => {
      const dir = join(work, 'racy-dir');
      mkdirSync(dir);
      const st = statSync(dir, { bigint: true });
      const tree = sha256('tree');
      const cacheDir = join(work, 'racy-dir-cache');
      const key = { namespace: 'ns', source: dir };
      const snap = { id: 'sn_y', root: sha256('root') };
      const rec = new StatCacheRecorder();
      rec.onDir({ rel: 'sub', st, tree, entries: 2, reused: false });
      assert.equal(await rec.save(cacheDir, key, snap), undefined);
      assert.equal((await LoadedStatCache.load(cacheDir, key, snap)).reuseDir('sub', st), undefined, 'made just before the import: racy');
      await sleep(RACY_MARGIN_MS + 200);
      const later = new StatCacheRecorder();
      later.onDir({ rel: 'sub', st, tree, entries: 2, reused: false });
      await later.save(cacheDir, key, snap);
      const ok = await LoadedStatCache.load(cacheDir, key, snap);
      assert.deepEqual(ok.reuseDir('sub', st), { tree, entries: 2 });
      assert.equal(ok.reuseDir('other', st), undefined);
      writeFileSync(join(dir, 'added.txt'), 'x');
      assert.equal(ok.reuseDir('sub', statSync(dir, { bigint: true })), undefined, 'an entry added: the mtime moved');
    });

    it('a file that kept changing while read is stored as last read and left out of the cache (read again next time)', async () => {
      const dir = join(work, 'changing');
      mkdirSync(dir);
      writeFileSync(join(dir, 'busy.log'), 'line\n'.repeat(100));
      writeFileSync(join(dir, 'calm.txt'), 'calm\n');
      await sleep(RACY_MARGIN_MS + 200);
      const writer = () =>
        new ContentWriter({
          store: svc.store,
          index: svc.catalog.dedupIndex(svc.namespace),
          testHooks: { afterRead: (p) => (p === 'busy.log' ? appendFileSync(join(dir, 'busy.log'), 'more\n') : undefined) },
        });
      const cacheDir = svc.statCacheDir();
      const r = await importSnapshot(svc.catalog, svc.namespace, writer, dir, { statCacheDir: cacheDir, allowChanging: true });
      assert.deepEqual(r.changing, ['busy.log']);
      const inc = await importSnapshot(
        svc.catalog,
        svc.namespace,
        () => new ContentWriter({ store: svc.store, index: svc.catalog.dedupIndex(svc.namespace) }),
        dir,
        {
          statCacheDir: cacheDir,
          parent: r.id,
        },
      );
      assert.deepEqual(inc.statCache, { reused: 1, read: 1 }, 'calm.txt reused, busy.log read again');
      const full = await svc.importSnapshot(dir);
      assert.equal(inc.root, full.root);
    });
  });
