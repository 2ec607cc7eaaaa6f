/**
 * The directory check of incremental imports (src/host/tree/dir-check.ts;
 * docs/explanation/incremental-prepare.md): the check a statx probe makes through the
 * directory's descriptor is the one the recorder makes from the lstats the import stored; a
 * directory whose check is unchanged is taken whole (no file looked up or given to onFile); a
 * file changed in place with its size and mtime put back (only its ctime moved), an entry set
 * that changed at the same count, a racy file, a capture policy that changed, and the git
 * proof all give what a full import gives. In a directory where one file changed, the others
 * are taken from their statx results and rows: neither lstat'ed by the walk nor opened.
 */
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { linkSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, renameSync, rmSync, symlinkSync } from 'node:fs';
import { appendFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Awc } from '../../../src/service/workspace/awc.js';
import { ContentWriter } from '../../../src/store/content/content-writer.js';
import { LoadedStatCache, RACY_MARGIN_MS, StatCacheRecorder } from '../../../src/service/import/stat-cache.js';
import { importDir, type ImportResult } from '../../../src/host/tree/import-dir.js';
import { DirCheckBuilder, probeDir } from '../../../src/host/tree/dir-check.js';
import { StatxAt } from '../../../src/host/sys/statx.js';
import { DirFd, dirFdTestHooks } from '../../../src/core/dir-fd.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Rewrites `p` with other bytes of the same size and puts its atime and mtime back to the nanosecond: only its ctime moves. */
function rewriteKeepingTimes(p: string, ref: string): void {
  execFileSync('touch', ['-r', p, ref]);
  const old = readFileSync(p);
  writeFileSync(p, Buffer.from(old.map((b, i) => (i === 0 ? b ^ 1 : b))));
  execFileSync('touch', ['-r', ref, p]);
}

/** A tree of three levels: `a/x` and `a/y` with 12 files each, `b` with 12 files, `top.txt`. */
function makeTree(dir: string): void {
  for (const d of ['a/x', 'a/y', 'b'])
    for (let i = 0; i < 12; i++) {
      mkdirSync(join(dir, d), { recursive: true });
      writeFileSync(join(dir, d, `f${i}.txt`), `${d} ${i}\n`.repeat(1 + i));
    }
  writeFileSync(join(dir, 'top.txt'), 'top\n');
}

describe('the directory check of incremental imports', () => {
  let work: string;
  let svc: Awc;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'awc-dircheck-'));
    svc = await Awc.open({ home: join(work, 'home'), mountDriver: 'copy' });
  });
  after(async () => {
    await svc.close();
    rmSync(work, { recursive: true, force: true });
  });

  /** A tree under `work`, imported twice past the racy margin: the second import's cache has every directory's check. */
  async function settledTree(name: string, make: (dir: string) => void = makeTree): Promise<{ tree: string; id: string }> {
    const tree = join(work, name);
    mkdirSync(tree);
    make(tree);
    await sleep(RACY_MARGIN_MS + 200);
    const first = await svc.importSnapshot(tree, { statCache: true });
    const second = await svc.importSnapshot(tree, { statCache: true, parent: first.id });
    return { tree, id: second.id };
  }

  /**
   * importDir of `tree` with the stat cache of snapshot `parentId` (as importSnapshot wires it),
   * counting the files given to onFile and the regular files of directories taken whole.
   */
  async function importCounting(tree: string, parentId: string, gitProof = false) {
    const parent = await svc.catalog.getSnapshot(svc.namespace, parentId);
    const key = { namespace: svc.namespace, source: realpathSync(tree) };
    const loaded = await LoadedStatCache.load(svc.statCacheDir(), key, parent);
    assert.equal(loaded.miss, undefined);
    const recorder = new StatCacheRecorder(loaded);
    let onFile = 0;
    let unread = 0;
    const r = await importDir(tree, new ContentWriter({ store: svc.store, index: svc.catalog.dedupIndex(svc.namespace) }), {
      reuse: loaded.reuse,
      reuseDir: loaded.reuseDir,
      recorded: loaded.recorded,
      onFile: (f) => {
        onFile++;
        recorder.onFile(f);
      },
      onDir: (d) => {
        unread += d.unread ?? 0;
        recorder.onDir(d);
      },
      gitProof,
    });
    return { r, onFile, unread };
  }

  it("keys: the check a statx probe makes through the directory's descriptor is the one made from Node's lstat", () => {
    const dir = join(work, 'keys');
    mkdirSync(join(dir, 'sub'), { recursive: true });
    writeFileSync(join(dir, 'b.txt'), 'b'.repeat(5000));
    writeFileSync(join(dir, 'a.sh'), '#!/bin/sh\n', { mode: 0o755 });
    const raw = (n: Buffer) => Buffer.concat([Buffer.from(`${dir}/`), n]);
    writeFileSync(raw(Buffer.from([0x66, 0xff, 0x2e, 0x74])), 'raw name\n'); // not UTF-8
    writeFileSync(join(dir, 'empty'), '');
    const sx = StatxAt.open();
    assert.ok(sx, 'statx through koffi loads on this host');
    const opened = DirFd.openRoot(dir)!;
    try {
      const names = opened.dir.list();
      const probe = probeDir(sx, new DirCheckBuilder(), opened.dir.fd, names);
      assert.ok(probe);
      const b = new DirCheckBuilder();
      for (const n of names) {
        const st = lstatSync(raw(n), { bigint: true });
        if (st.isDirectory()) b.addDir(n);
        else b.addFileStats(n, st);
      }
      assert.equal(probe.check, b.digest());
      assert.equal(probe.files, 4);
      assert.equal(probe.bytes, 5000 + 10 + 9);
      // a symlink, or a second link to a file: no check can be made
      symlinkSync('b.txt', join(dir, 'link'));
      assert.equal(probeDir(sx, new DirCheckBuilder(), opened.dir.fd, opened.dir.list()), undefined);
      rmSync(join(dir, 'link'));
      linkSync(join(dir, 'b.txt'), join(dir, 'hard'));
      assert.equal(probeDir(sx, new DirCheckBuilder(), opened.dir.fd, opened.dir.list()), undefined);
    } finally {
      opened.dir.close();
    }
  });

  it('nothing changed: every directory is taken whole, no file is looked up, and the root is the same', async () => {
    const { tree, id } = await settledTree('same');
    const parent = await svc.getSnapshot(id);
    const { r, onFile, unread } = await importCounting(tree, id);
    assert.equal(r.root, parent.root);
    assert.equal(onFile, 0, 'no file given to onFile: taken with their directories');
    assert.equal(unread, 37);
    assert.equal(r.fileCount, 37);
  });

  it('a file rewritten in place with its size and mtime put back (only its ctime moved) is read; its directory and those above are not taken whole', async () => {
    const { tree, id } = await settledTree('ctime');
    const f = join(tree, 'a', 'x', 'f3.txt');
    const before = lstatSync(f, { bigint: true });
    const dirBefore = lstatSync(dirname(f), { bigint: true });
    rewriteKeepingTimes(f, join(work, 'times-ref'));
    const now = lstatSync(f, { bigint: true });
    assert.equal(now.mtimeNs, before.mtimeNs);
    assert.equal(now.size, before.size);
    assert.notEqual(now.ctimeNs, before.ctimeNs);
    assert.equal(lstatSync(dirname(f), { bigint: true }).mtimeNs, dirBefore.mtimeNs, "the directory's mtime did not move");
    const { r, unread } = await importCounting(tree, id);
    const full = await svc.importSnapshot(tree, { message: 'full' });
    assert.equal(r.root, full.root);
    assert.notEqual(r.root, (await svc.getSnapshot(id)).root);
    assert.equal(unread, 24, 'a/y and b taken whole; a/x, a and the root looked at entry by entry');
  });

  it("one file changed: the other files of its directory are taken from their statx results and rows (not lstat'ed or opened), and the root is the full import's", async () => {
    const { tree, id } = await settledTree('one-changed');
    appendFileSync(join(tree, 'b', 'f5.txt'), 'changed\n');
    await sleep(RACY_MARGIN_MS + 200); // the changed file outside the racy window: its row is trusted next time
    const lstated: string[] = [];
    const opened: string[] = [];
    dirFdTestHooks.onLstat = (rel) => lstated.push(rel);
    dirFdTestHooks.beforeOpen = (rel) => opened.push(rel);
    let counted;
    try {
      counted = await importCounting(tree, id);
    } finally {
      dirFdTestHooks.onLstat = undefined;
      dirFdTestHooks.beforeOpen = undefined;
    }
    const { r, onFile, unread } = counted;
    const full = await svc.importSnapshot(tree, { message: 'full' });
    assert.equal(r.root, full.root);
    assert.notEqual(r.root, (await svc.getSnapshot(id)).root);
    const files = (rels: string[]) => rels.filter((rel) => rel.endsWith('.txt'));
    assert.deepEqual(files(lstated), ['b/f5.txt'], 'only the changed file is lstat-ed by the walk');
    assert.deepEqual(files(opened), ['b/f5.txt'], 'only the changed file is opened');
    assert.equal(onFile, 13, "b's 12 files and top.txt (the root is built again) given to onFile");
    assert.equal(unread, 24, 'a/x and a/y taken whole');
    assert.equal(r.fileCount, 37);
    // the rows and checks recorded from the statx results let the next import take every directory whole
    const inc = await svc.importSnapshot(tree, { statCache: true, parent: id });
    assert.equal(inc.root, full.root);
    const next = await importCounting(tree, inc.id);
    assert.equal(next.r.root, full.root);
    assert.equal(next.onFile, 0);
    assert.equal(next.unread, 37);
  });

  it('an entry set that changed at the same count (a file renamed, another removed and one added) gives the full import', async () => {
    const { tree, id } = await settledTree('renamed');
    renameSync(join(tree, 'b', 'f1.txt'), join(tree, 'b', 'g1.txt'));
    rmSync(join(tree, 'a', 'y', 'f2.txt'));
    writeFileSync(join(tree, 'a', 'y', 'new.txt'), 'new\n');
    const inc = await svc.importSnapshot(tree, { statCache: true, parent: id });
    const full = await svc.importSnapshot(tree, { message: 'full' });
    assert.equal(inc.root, full.root);
    assert.equal(inc.files, 37);
  });

  it('racy: a file written just before an import is read again by the next one (its directory has no check)', async () => {
    const { tree, id } = await settledTree('racy');
    appendFileSync(join(tree, 'b', 'f5.txt'), 'racy\n');
    const inc = await svc.importSnapshot(tree, { statCache: true, parent: id }); // b/f5.txt changed within the margin
    assert.equal(inc.statCache!.read, 1);
    const { r, onFile, unread } = await importCounting(tree, inc.id);
    assert.equal(r.root, inc.root);
    assert.equal(onFile, 13, "b's files and top.txt (b's parent is built again) are looked up one by one; f5.txt is read (it was racy)");
    assert.equal(unread, 24);
  });

  it('a capture policy that changed applies to files of unchanged directories (a new secret pattern leaves one out)', async () => {
    const { tree, id } = await settledTree('policy');
    writeFileSync(join(tree, '.awc.json'), JSON.stringify({ secrets: ['f7.txt'] }));
    const inc = await svc.importSnapshot(tree, { statCache: true, parent: id });
    const full = await svc.importSnapshot(tree, { message: 'full' });
    assert.equal(inc.root, full.root);
    assert.deepEqual(inc.secrets.map((s) => s.path).sort(), ['a/x/f7.txt', 'a/y/f7.txt', 'b/f7.txt']);
    // under the same policy again, the secrets are still left out
    await sleep(RACY_MARGIN_MS + 200);
    const again = await svc.importSnapshot(tree, { statCache: true, parent: inc.id });
    const last = await svc.importSnapshot(tree, { statCache: true, parent: again.id });
    assert.equal(last.root, full.root);
    assert.equal(last.secrets.length, 3);
  });

  it('the git proof of a directory taken whole is the full import’s', async () => {
    const { tree, id } = await settledTree('git', (dir) => {
      makeTree(dir);
      execFileSync('git', ['init', '-q', dir]);
      execFileSync('git', ['-C', dir, 'add', '-A']);
      execFileSync('git', ['-C', dir, '-c', 'user.name=t', '-c', 'user.email=t@e', 'commit', '-qm', 'init']);
    });
    const inc = await importCounting(tree, id, true);
    const full: ImportResult = await importDir(
      tree,
      new ContentWriter({ store: svc.store, index: svc.catalog.dedupIndex(svc.namespace) }),
      {
        gitProof: true,
      },
    );
    assert.ok(full.gitProof, 'the full import proves the index');
    assert.deepEqual(inc.r.gitProof, full.gitProof);
    assert.equal(inc.r.root, full.root);
    assert.ok(inc.unread >= 37, `the tracked directories taken whole (${inc.unread} files unread)`);
  });
});
