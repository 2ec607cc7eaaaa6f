import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, mkdir, writeFile, chmod, symlink, rm, readdir, lstat, readFile, readlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Digest } from '../../../src/core/digest.js';
import type { Entry } from '../../../src/core/tree.js';
import type { TreeSource } from '../../../src/store/content/tree-source.js';
import { ContentWriter } from '../../../src/store/content/content-writer.js';
import { ContentReader } from '../../../src/store/content/content-reader.js';
import { MemoryBlobIndex } from '../../../src/store/pack/memory-blob-index.js';
import { FsObjectStore } from '../../../src/store/fs/fs-object-store.js';
import { diffSnapshots, formatChanges, type Change } from '../../../src/service/diff/diff.js';
import { renderPatch, quoteGitPath, gitBlobSha1, type PatchFileRef } from '../../../src/service/diff/patch.js';

// ---------------------------------------------------------------------------
// Tree specs: a compact way to describe a snapshot in a test.

interface FileNode {
  file: string | Buffer;
  mode?: number;
  uid?: number;
  gid?: number;
  mtimeNs?: string;
}
interface LinkNode {
  link: string;
}
interface HardNode {
  hardlink: string;
}
interface DirNode {
  dir: Spec;
  mode?: number;
  uid?: number;
}
interface FifoNode {
  fifo: true;
}
type Node = string | Buffer | FileNode | LinkNode | HardNode | DirNode | FifoNode;
interface Spec {
  [name: string]: Node;
}

const MTIME = '1700000000000000000';

/** A store + index + writer in a temp directory; `build` writes a spec as a snapshot. */
class World {
  readonly index = new MemoryBlobIndex();
  readonly store: FsObjectStore;
  private readonly writer: ContentWriter;
  private flushed = false;

  constructor(readonly dir: string) {
    this.store = new FsObjectStore(dir);
    this.writer = new ContentWriter({ store: this.store, index: this.index });
  }

  async build(spec: Spec, rootMode = 0o755): Promise<Digest> {
    const tree = await this.buildDir(spec);
    return this.writer.writeRoot({ mode: rootMode, uid: 0, gid: 0, mtimeNs: MTIME, tree });
  }

  private async buildDir(spec: Spec): Promise<Digest> {
    const entries: Entry[] = [];
    for (const [name, n] of Object.entries(spec)) {
      if (typeof n === 'string' || Buffer.isBuffer(n)) {
        entries.push(await this.file(name, { file: n }));
      } else if ('file' in n) {
        entries.push(await this.file(name, n));
      } else if ('link' in n) {
        entries.push({ type: 'symlink', name, mode: 0o777, uid: 0, gid: 0, mtimeNs: MTIME, target: n.link });
      } else if ('hardlink' in n) {
        entries.push({ type: 'hardlink', name, target: n.hardlink });
      } else if ('dir' in n) {
        const tree = await this.buildDir(n.dir);
        entries.push({ type: 'dir', name, mode: n.mode ?? 0o755, uid: n.uid ?? 0, gid: 0, mtimeNs: MTIME, tree });
      } else {
        entries.push({ type: 'fifo', name, mode: 0o644, uid: 0, gid: 0, mtimeNs: MTIME, rdev: 0 });
      }
    }
    return this.writer.writeTree(entries);
  }

  private async file(name: string, n: FileNode): Promise<Entry> {
    const data = typeof n.file === 'string' ? Buffer.from(n.file, 'utf8') : n.file;
    const w = await this.writer.writeBuffer(data);
    return {
      type: 'file',
      name,
      mode: n.mode ?? 0o644,
      uid: n.uid ?? 0,
      gid: n.gid ?? 0,
      mtimeNs: n.mtimeNs ?? MTIME,
      size: w.size,
      digest: w.digest,
      chunks: w.chunks,
    };
  }

  /** Flushes the writer once, indexes what it wrote, and returns a reader. */
  async reader(): Promise<ContentReader> {
    if (!this.flushed) {
      const packs = await this.writer.flush();
      this.index.add(packs.flatMap((p) => p.blobs));
      this.flushed = true;
    }
    return new ContentReader({ store: this.store, index: this.index });
  }
}

/** Builds `from` and `to` in a fresh world; returns the roots and a reader. */
async function two(from: Spec, to: Spec): Promise<{ a: Digest; b: Digest; reader: ContentReader; world: World }> {
  const world = new World(await mkdtemp(join(tmpdir(), 'awc-diff-store-')));
  cleanup.push(world.dir);
  const a = await world.build(from);
  const b = await world.build(to);
  return { a, b, reader: await world.reader(), world };
}

const cleanup: string[] = [];
after(async () => {
  for (const d of cleanup) await rm(d, { recursive: true, force: true });
});

/** `[status, path]` pairs, for compact assertions. */
function brief(changes: Change[]): [string, string][] {
  return changes.map((c) => [c.status, c.path]);
}

// ---------------------------------------------------------------------------

describe('diffSnapshots', () => {
  test('identical snapshots have no changes and read no trees', async () => {
    const { a, b, reader } = await two({ x: 'same\n' }, { x: 'same\n' });
    assert.equal(a, b);
    let reads = 0;
    const src: TreeSource = { readTree: (d) => (reads++, reader.readTree(d)), readRoot: (d) => reader.readRoot(d) };
    assert.deepEqual(await diffSnapshots(src, a, b), []);
    assert.equal(reads, 0);
  });

  test('added, modified, deleted files in tree order', async () => {
    const { a, b, reader } = await two(
      { 'keep.txt': 'k\n', 'mod.txt': 'one\n', 'gone.txt': 'bye\n', sub: { dir: { 'inner.txt': 'i\n', 'same.txt': 's\n' } } },
      {
        'keep.txt': 'k\n',
        'mod.txt': 'two\n',
        'new.txt': 'hi\n',
        sub: { dir: { 'inner.txt': 'I\n', 'same.txt': 's\n', 'added.txt': 'a\n' } },
      },
    );
    const changes = await diffSnapshots(reader, a, b);
    assert.deepEqual(brief(changes), [
      ['deleted', 'gone.txt'],
      ['modified', 'mod.txt'],
      ['added', 'new.txt'],
      ['added', 'sub/added.txt'],
      ['modified', 'sub/inner.txt'],
    ]);
    const mod = changes[1];
    assert.equal(mod.kind, 'file');
    assert.equal(mod.old?.size, 4);
    assert.equal(mod.old?.mode, 0o644);
    assert.notEqual(mod.old?.digest, mod.new?.digest);
    assert.equal(changes[0].kind, 'file');
    assert.equal(changes[0].new, undefined);
    assert.equal(changes[2].old, undefined);
    assert.equal(changes[2].new?.size, 3);
  });

  test('tree order is by name bytes, a directory before its contents', async () => {
    const { a, b, reader } = await two({}, { 'a-b': 'x', a: { dir: { x: 'x', 'y z': 'y' } }, B: 'b', é: 'e' });
    assert.deepEqual(
      brief(await diffSnapshots(reader, a, b)).map(([, p]) => p),
      ['B', 'a', 'a/x', 'a/y z', 'a-b', 'é'],
    );
  });

  test('chmod only is mode-changed; chmod with content is modified with both modes', async () => {
    const { a, b, reader } = await two(
      { 'run.sh': { file: 'echo\n' }, 'both.sh': { file: 'a\n' }, d: { dir: {}, mode: 0o755 } },
      { 'run.sh': { file: 'echo\n', mode: 0o755 }, 'both.sh': { file: 'b\n', mode: 0o4755 }, d: { dir: {}, mode: 0o700 } },
    );
    const changes = await diffSnapshots(reader, a, b);
    assert.deepEqual(brief(changes), [
      ['modified', 'both.sh'],
      ['mode-changed', 'd'],
      ['mode-changed', 'run.sh'],
    ]);
    assert.equal(changes[0].old?.mode, 0o644);
    assert.equal(changes[0].new?.mode, 0o4755);
    assert.equal(changes[2].old?.mode, 0o644);
    assert.equal(changes[2].new?.mode, 0o755);
    assert.equal(changes[1].kind, 'dir');
    assert.equal(formatChanges(changes), 'M  both.sh (0644 → 4755)\nP  d/ (0755 → 0700)\nP  run.sh (0644 → 0755)\n');
  });

  test('type changes: file→symlink, file→dir (contents added), dir→file (contents deleted)', async () => {
    const { a, b, reader } = await two(
      { f2l: 'x\n', f2d: 'y\n', d2f: { dir: { inner: 'i\n', deep: { dir: { z: 'z' } } } } },
      { f2l: { link: 'target' }, f2d: { dir: { n: 'n\n' } }, d2f: 'now a file\n' },
    );
    const changes = await diffSnapshots(reader, a, b);
    assert.deepEqual(brief(changes), [
      ['type-changed', 'd2f'],
      ['deleted', 'd2f/deep'],
      ['deleted', 'd2f/deep/z'],
      ['deleted', 'd2f/inner'],
      ['type-changed', 'f2d'],
      ['added', 'f2d/n'],
      ['type-changed', 'f2l'],
    ]);
    assert.equal(changes[0].kind, 'file');
    assert.equal(changes[0].old?.type, 'dir');
    assert.equal(changes[6].kind, 'symlink');
    assert.equal(changes[6].new?.target, 'target');
    assert.match(formatChanges(changes), /^T {2}f2l \(file → symlink\)$/m);
    assert.match(formatChanges(changes), /^T {2}f2d\/ \(file → dir\)$/m);
    assert.match(formatChanges(changes), /^D {2}d2f\/deep\/$/m);
  });

  test('added directory reports itself and every entry under it', async () => {
    const { a, b, reader } = await two(
      { top: 't' },
      {
        top: 't',
        pkg: { dir: { 'index.js': 'x', lib: { dir: { 'a.js': 'a', 'b.js': 'b' } }, empty: { dir: {} }, ln: { link: 'index.js' } } },
      },
    );
    const changes = await diffSnapshots(reader, a, b);
    assert.deepEqual(brief(changes), [
      ['added', 'pkg'],
      ['added', 'pkg/empty'],
      ['added', 'pkg/index.js'],
      ['added', 'pkg/lib'],
      ['added', 'pkg/lib/a.js'],
      ['added', 'pkg/lib/b.js'],
      ['added', 'pkg/ln'],
    ]);
    assert.deepEqual(
      changes.map((c) => c.kind),
      ['dir', 'dir', 'file', 'dir', 'file', 'file', 'symlink'],
    );
  });

  test('deleted directory reports itself and every entry under it', async () => {
    const { a, b, reader } = await two({ old: { dir: { x: 'x', sub: { dir: { y: 'y' } } } }, keep: 'k' }, { keep: 'k' });
    const changes = await diffSnapshots(reader, a, b);
    assert.deepEqual(brief(changes), [
      ['deleted', 'old'],
      ['deleted', 'old/sub'],
      ['deleted', 'old/sub/y'],
      ['deleted', 'old/x'],
    ]);
    assert.ok(changes.every((c) => c.old && !c.new));
    assert.equal(formatChanges(changes), 'D  old/\nD  old/sub/\nD  old/sub/y\nD  old/x\n');
  });

  test('a renamed file is a deletion plus an addition with the same digest', async () => {
    const { a, b, reader } = await two({ 'before.txt': 'content\n' }, { 'after.txt': 'content\n' });
    const changes = await diffSnapshots(reader, a, b);
    assert.deepEqual(brief(changes), [
      ['added', 'after.txt'],
      ['deleted', 'before.txt'],
    ]);
    assert.equal(changes[0].new?.digest, changes[1].old?.digest);
  });

  test('an unchanged subtree is never read', async () => {
    const big = { dir: { a: 'a', b: 'b', nested: { dir: { c: 'c', deeper: { dir: { d: 'd' } } } } } };
    const { a, b, reader } = await two(
      { big, small: { dir: { x: 'x', y: 'y' } }, 'f.txt': '1' },
      { big, small: { dir: { x: 'X', y: 'y' } }, 'f.txt': '1' },
    );
    const root = await reader.readRoot(a);
    const top = await reader.readTree(root.tree);
    const bigEntry = top.entries.find((e) => e.name === 'big');
    assert.ok(bigEntry && bigEntry.type === 'dir');
    const bigTree = await reader.readTree(bigEntry.tree);
    const nested = bigTree.entries.find((e) => e.name === 'nested');
    assert.ok(nested && nested.type === 'dir');

    const reads: Digest[] = [];
    const counting: TreeSource = {
      readTree: (d) => {
        reads.push(d);
        return reader.readTree(d);
      },
      readRoot: (d) => reader.readRoot(d),
    };
    const changes = await diffSnapshots(counting, a, b);
    assert.deepEqual(brief(changes), [['modified', 'small/x']]);
    assert.ok(!reads.includes(bigEntry.tree), 'the unchanged directory was read');
    assert.ok(!reads.includes(nested.tree), 'a directory under the unchanged one was read');
    assert.equal(reads.length, 4, 'two root trees and two `small` trees');
  });

  test('hardlink and symlink target changes are modifications; fifos are compared', async () => {
    const { a, b, reader } = await two(
      { f: 'f', g: 'g', hl: { hardlink: 'f' }, sl: { link: 'f' }, p: { fifo: true } },
      { f: 'f', g: 'g', hl: { hardlink: 'g' }, sl: { link: '/abs/dangling' }, p: { fifo: true } },
    );
    const changes = await diffSnapshots(reader, a, b);
    assert.deepEqual(brief(changes), [
      ['modified', 'hl'],
      ['modified', 'sl'],
    ]);
    assert.deepEqual(changes[0].old, { type: 'hardlink', target: 'f' });
    assert.deepEqual(changes[0].new, { type: 'hardlink', target: 'g' });
    assert.equal(changes[1].new?.target, '/abs/dangling');
  });

  test('uid/gid/mtime differences are reported only with { metadata: true }', async () => {
    const { a, b, reader } = await two(
      { o: { file: 'x', uid: 0 }, t: { file: 'y', mtimeNs: '1' }, m: { file: 'z' }, d: { dir: { q: 'q' }, uid: 0 } },
      {
        o: { file: 'x', uid: 1000 },
        t: { file: 'y', mtimeNs: '2' },
        m: { file: 'z', mode: 0o600, uid: 5 },
        d: { dir: { q: 'q' }, uid: 7 },
      },
    );
    assert.deepEqual(brief(await diffSnapshots(reader, a, b)), [['mode-changed', 'm']]);
    const changes = await diffSnapshots(reader, a, b, { metadata: true });
    assert.deepEqual(brief(changes), [
      ['metadata-changed', 'd'],
      ['mode-changed', 'm'],
      ['metadata-changed', 'o'],
      ['metadata-changed', 't'],
    ]);
    assert.equal(changes[2].old?.uid, 0);
    assert.equal(changes[2].new?.uid, 1000);
    assert.equal(changes[1].new?.uid, 5);
    assert.equal(formatChanges(changes), 'I  d/ (uid 0 → 7)\nP  m (0644 → 0600)\nI  o (uid 0 → 1000)\nI  t (mtime)\n');
  });

  test('the root object attributes are ignored', async () => {
    const world = new World(await mkdtemp(join(tmpdir(), 'awc-diff-store-')));
    cleanup.push(world.dir);
    const a = await world.build({ x: 'x' }, 0o755);
    const b = await world.build({ x: 'x' }, 0o700);
    assert.notEqual(a, b);
    assert.deepEqual(await diffSnapshots(await world.reader(), a, b, { metadata: true }), []);
  });

  test('diffs a stored snapshot against a dry-run (live) state through `extra: writer.sessionBlob`', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'awc-diff-store-'));
    cleanup.push(dir);
    const store = new FsObjectStore(dir);
    const index = new MemoryBlobIndex();
    const stored = new ContentWriter({ store, index });
    const file = async (w: ContentWriter, name: string, text: string): Promise<Entry> => {
      const c = await w.writeBuffer(Buffer.from(text));
      return { type: 'file', name, mode: 0o644, uid: 0, gid: 0, mtimeNs: MTIME, size: c.size, digest: c.digest, chunks: c.chunks };
    };
    const root = (w: ContentWriter, tree: Digest) => w.writeRoot({ mode: 0o755, uid: 0, gid: 0, mtimeNs: MTIME, tree });
    const a = await root(stored, await stored.writeTree([await file(stored, 'x', 'old\n'), await file(stored, 'y', 'y\n')]));
    index.add((await stored.flush()).flatMap((p) => p.blobs));

    const live = new ContentWriter({ store, index, dryRun: true });
    const b = await root(live, await live.writeTree([await file(live, 'x', 'new\n'), await file(live, 'z', 'z\n')]));
    const reader = new ContentReader({ store, index, extra: (d) => live.sessionBlob(d) });
    assert.deepEqual(brief(await diffSnapshots(reader, a, b)), [
      ['modified', 'x'],
      ['deleted', 'y'],
      ['added', 'z'],
    ]);
  });

  test('formatChanges quotes paths with control characters', () => {
    const out = formatChanges([{ path: 'a\nb', status: 'added', kind: 'file', new: { type: 'file', mode: 0o644 } }]);
    assert.equal(out, 'A  "a\\nb"\n');
    assert.equal(formatChanges([]), '');
  });
});

// ---------------------------------------------------------------------------
// Patches, checked with real git.

const GIT_ENV = { ...process.env, GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null', LC_ALL: 'C' };

function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@e', ...args], {
    cwd,
    env: GIT_ENV,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/** What git can see of a working tree: files (content + exec bit) and symlinks (target). */
type Visible = Map<string, { type: 'file'; exec: boolean; content: Buffer } | { type: 'symlink'; target: string }>;

function dataOf(n: string | Buffer | FileNode): Buffer {
  const d = typeof n === 'string' || Buffer.isBuffer(n) ? n : n.file;
  return typeof d === 'string' ? Buffer.from(d, 'utf8') : d;
}

/** Finds a node by slash path in a spec. */
function nodeAt(spec: Spec, path: string): Node | undefined {
  const names = path.split('/');
  let cur: Spec = spec;
  for (let i = 0; i < names.length - 1; i++) {
    const n = cur[names[i]];
    if (!n || typeof n === 'string' || Buffer.isBuffer(n) || !('dir' in n)) return undefined;
    cur = n.dir;
  }
  return cur[names[names.length - 1]];
}

function expected(spec: Spec, root: Spec = spec, prefix = '', out: Visible = new Map()): Visible {
  for (const [name, n0] of Object.entries(spec)) {
    const path = prefix ? `${prefix}/${name}` : name;
    let n = n0;
    if (typeof n !== 'string' && !Buffer.isBuffer(n) && 'hardlink' in n) n = nodeAt(root, n.hardlink)!;
    if (typeof n === 'string' || Buffer.isBuffer(n) || 'file' in n) {
      const mode = typeof n === 'string' || Buffer.isBuffer(n) ? 0o644 : (n.mode ?? 0o644);
      out.set(path, { type: 'file', exec: (mode & 0o100) !== 0, content: dataOf(n) });
    } else if ('link' in n) out.set(path, { type: 'symlink', target: n.link });
    else if ('dir' in n) expected(n.dir, root, path, out);
  }
  return out;
}

async function materialise(dir: string, spec: Spec): Promise<void> {
  for (const [name, n] of Object.entries(spec)) {
    const p = join(dir, name);
    if (typeof n === 'string' || Buffer.isBuffer(n) || 'file' in n) {
      await writeFile(p, dataOf(n));
      await chmod(p, typeof n === 'string' || Buffer.isBuffer(n) ? 0o644 : (n.mode ?? 0o644));
    } else if ('link' in n) await symlink(n.link, p);
    else if ('hardlink' in n) {
      const t = nodeAt(spec, n.hardlink);
      assert.ok(t && (typeof t === 'string' || Buffer.isBuffer(t) || 'file' in t), 'test hardlinks point to files in the same directory');
      await writeFile(p, dataOf(t));
      await chmod(p, typeof t === 'string' || Buffer.isBuffer(t) ? 0o644 : (t.mode ?? 0o644));
    } else if ('dir' in n) {
      await mkdir(p);
      await materialise(p, n.dir);
    }
  }
}

async function scan(dir: string, prefix = '', out: Visible = new Map()): Promise<Visible> {
  for (const name of await readdir(dir)) {
    if (prefix === '' && name === '.git') continue;
    const p = join(dir, name);
    const path = prefix ? `${prefix}/${name}` : name;
    const st = await lstat(p);
    if (st.isSymbolicLink()) out.set(path, { type: 'symlink', target: await readlink(p) });
    else if (st.isDirectory()) await scan(p, path, out);
    else out.set(path, { type: 'file', exec: (st.mode & 0o100) !== 0, content: await readFile(p) });
  }
  return out;
}

async function readAll(reader: ContentReader, f: PatchFileRef): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const b of reader.readFile(f)) parts.push(b);
  return Buffer.concat(parts);
}

/**
 * Renders the patch from → to, applies it with `git apply` to a git repository holding
 * `from`, and asserts the working tree then equals `to` (as far as git can represent it).
 */
async function applyRoundTrip(from: Spec, to: Spec, opts: Parameters<typeof renderPatch>[5] = {}): Promise<string> {
  const { a, b, reader } = await two(from, to);
  const changes = await diffSnapshots(reader, a, b);
  const patch = await renderPatch(reader, (f) => readAll(reader, f), changes, a, b, opts);
  const repo = await mkdtemp(join(tmpdir(), 'awc-diff-git-'));
  cleanup.push(repo);
  await materialise(repo, from);
  git(repo, 'init', '-q');
  git(repo, 'add', '-A');
  git(repo, 'commit', '-q', '--allow-empty', '-m', 'from');
  assert.deepEqual(await scan(repo), expected(from), 'materialised "from" matches its spec');
  const pf = join(repo, '.git', 'awc.patch');
  await writeFile(pf, patch);
  try {
    git(repo, 'apply', '--check', pf);
    git(repo, 'apply', pf);
  } catch (err) {
    const e = err as { stderr?: string };
    assert.fail(`git apply failed: ${e.stderr}\n--- patch ---\n${patch}`);
  }
  assert.deepEqual(await scan(repo), expected(to), `working tree after git apply equals "to"\n--- patch ---\n${patch}`);
  return patch;
}

describe('renderPatch', () => {
  let lines = '';
  before(() => {
    for (let i = 1; i <= 30; i++) lines += `line ${i}\n`;
  });

  test('text modify, add, delete, exec bit, symlinks, no trailing newline, empty files', async () => {
    const to = lines.replace('line 5\n', 'line five\n').replace('line 28\n', 'line 28\nline 28.5\n');
    const patch = await applyRoundTrip(
      {
        'README.md': lines,
        'del.txt': 'delete me\n',
        'script.sh': '#!/bin/sh\necho hi\n',
        'nonl.txt': 'a\nb',
        'addnl.txt': 'x\ny',
        'dropnl.txt': 'p\nq\n',
        'gone-empty': '',
        'will-empty.txt': 'something\n',
        'exec-mod.sh': { file: 'v1\n' },
        keep: { dir: { 'x.txt': 'unchanged\n' } },
        'old-link': { link: 'README.md' },
        'sp ace.txt': 'one\n',
      },
      {
        'README.md': to,
        'script.sh': { file: '#!/bin/sh\necho hi\n', mode: 0o755 },
        'nonl.txt': 'a\nB',
        'addnl.txt': 'x\ny\n',
        'dropnl.txt': 'p\nq',
        'will-empty.txt': '',
        'exec-mod.sh': { file: 'v2\n', mode: 0o755 },
        keep: { dir: { 'x.txt': 'unchanged\n' } },
        'new.txt': 'brand new\n',
        'new-nonl.txt': 'no newline',
        empty: '',
        link: { link: 'README.md' },
        dangling: { link: '/nonexistent/abs' },
        'old-link': { link: 'new.txt' },
        'sp ace.txt': 'two\n',
        newdir: { dir: { sub: { dir: { 'f.txt': 'deep\n' } } } },
      },
    );
    assert.match(patch, /^diff --git a\/script\.sh b\/script\.sh\nold mode 100644\nnew mode 100755\n(?!index)/m);
    assert.match(
      patch,
      /^diff --git a\/link b\/link\nnew file mode 120000\nindex 0000000\.\.[0-9a-f]{7}\n--- \/dev\/null\n\+\+\+ b\/link\n@@ -0,0 \+1 @@\n\+README\.md\n\\ No newline at end of file\n/m,
    );
    assert.match(patch, /^diff --git a\/empty b\/empty\nnew file mode 100644\nindex 0000000\.\.e69de29\n(?!---)/m);
    assert.match(patch, /^deleted file mode 100644\nindex e69de29\.\.0000000\n/m);
    assert.match(patch, /^--- a\/sp ace\.txt\t\n\+\+\+ b\/sp ace\.txt\t\n/m);
    assert.match(patch, /^@@ -2,7 \+2,7 @@\n line 2\n/m);
    assert.ok(!patch.includes('keep/x.txt'));
    assert.ok(!patch.includes('newdir\n'), 'directories produce nothing themselves');
  });

  test('index line uses git blob names', async () => {
    assert.equal(gitBlobSha1(Buffer.alloc(0)), 'e69de29bb2d1d6434b8b29ae775ad8c2e48c5391');
    const patch = await applyRoundTrip({ f: 'hello\n' }, { f: 'world\n' });
    assert.match(patch, /^index ce01362\.\.cc628cc 100644$/m);
  });

  test('type changes render as delete + add; file↔dir; hardlinks as regular files', async () => {
    await applyRoundTrip(
      {
        f2l: 'x\n',
        l2f: { link: 'f2l' },
        f2d: 'y\n',
        d2f: { dir: { inner: 'i\n', deep: { dir: { z: 'z' } } } },
        base: 'shared\n',
        base2: 'other\n',
        hl: { hardlink: 'base' },
      },
      {
        f2l: { link: 'somewhere' },
        l2f: 'now a file\n',
        f2d: { dir: { n: 'n\n' } },
        d2f: 'was a dir\n',
        base: 'shared\n',
        base2: 'other\n',
        hl: { hardlink: 'base2' },
        hl2: { hardlink: 'base' },
      },
    );
  });

  test('renamed file and deleted directory', async () => {
    await applyRoundTrip({ 'before.txt': 'content\n', old: { dir: { a: 'a\n', b: { dir: { c: 'c\n' } } } } }, { 'after.txt': 'content\n' });
  });

  test('paths that git quotes', async () => {
    assert.equal(quoteGitPath('a/plain name'), 'a/plain name');
    assert.equal(quoteGitPath('a/ünï'), '"a/\\303\\274n\\303\\257"');
    assert.equal(quoteGitPath('a/q"t\\b\tx'), '"a/q\\"t\\\\b\\tx"');
    await applyRoundTrip({ 'ünï.txt': 'u\n', 'tab\there': 't\n' }, { 'ünï.txt': 'U\n', 'tab\there': 'T\n', 'quo"te': 'q\n' });
  });

  test('CRLF text round-trips', async () => {
    await applyRoundTrip({ 'win.txt': 'a\r\nb\r\nc\r\n' }, { 'win.txt': 'a\r\nB\r\nc\r\n' });
  });

  test('binary files are reported as binary; { binary: "full" } applies', async () => {
    const bin1 = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 1, 2, 3, 4, 5]);
    const bin2 = Buffer.concat([bin1, Buffer.alloc(3000, 7), Buffer.from([0, 0, 9])]);
    const { a, b, reader } = await two({ 'img.png': bin1, 'gone.bin': bin1 }, { 'img.png': bin2, 'new.bin': bin2 });
    const changes = await diffSnapshots(reader, a, b);
    const patch = await renderPatch(reader, (f) => readAll(reader, f), changes, a, b);
    assert.match(patch, /^Binary files a\/img\.png and b\/img\.png differ$/m);
    assert.match(patch, /^Binary files \/dev\/null and b\/new\.bin differ$/m);
    assert.match(patch, /^Binary files a\/gone\.bin and \/dev\/null differ$/m);

    const full = await applyRoundTrip(
      { 'img.png': bin1, 'gone.bin': bin1, 't.txt': 'x\n' },
      { 'img.png': bin2, 'new.bin': bin2, 't.txt': 'y\n' },
      { binary: 'full' },
    );
    assert.match(full, /^GIT binary patch$/m);
    assert.match(full, /^index [0-9a-f]{40}\.\.[0-9a-f]{40} 100644$/m);
  });

  test('a binary-free patch passes git apply --check even when big', async () => {
    let big = '';
    for (let i = 0; i < 5000; i++) big += `row ${i} ${i % 7}\n`;
    const changed = big.replace('row 100 2\n', '').replace('row 4000 3\n', 'row 4000 three\n') + 'tail';
    await applyRoundTrip({ big }, { big: changed });
  });

  test('fifos are skipped and reported; chmod that git cannot see renders nothing', async () => {
    const { a, b, reader } = await two({ f: { file: 'x', mode: 0o644 } }, { f: { file: 'x', mode: 0o600 }, p: { fifo: true } });
    const changes = await diffSnapshots(reader, a, b);
    assert.deepEqual(brief(changes), [
      ['mode-changed', 'f'],
      ['added', 'p'],
    ]);
    const skipped: string[] = [];
    const patch = await renderPatch(reader, (f) => readAll(reader, f), changes, a, b, { onSkipped: (p) => skipped.push(p) });
    assert.equal(patch, '');
    assert.deepEqual(skipped, ['p']);
  });

  test('mode-only change does not read file contents', async () => {
    const { a, b, reader } = await two({ s: { file: 'echo\n' } }, { s: { file: 'echo\n', mode: 0o755 } });
    const changes = await diffSnapshots(reader, a, b);
    const patch = await renderPatch(reader, () => assert.fail('content was read'), changes, a, b);
    assert.equal(patch, 'diff --git a/s b/s\nold mode 100644\nnew mode 100755\n');
  });
});
