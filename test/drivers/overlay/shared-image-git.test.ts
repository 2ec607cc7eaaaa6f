/**
 * Issue 26, git-proof snapshots: a snapshot whose import proved `.git/index` (the ones agent
 * worktrees use) gets a shared layer image like any other. The image holds a rewritten
 * `.git/index` whose stat data are what the mounted image reports (src/drivers/overlay/layer-git-index.ts,
 * imageGitIndex): each file's EROFS node id as its inode number, ctime = mtime. Hosts (homes) E, F
 * and G share one SQLite catalog file and one directory store: E imports with `layerImages: on`,
 * F (a new host) mounts the image, G (`layerImages: off`) builds the layer directory itself. In
 * both workspaces `git status` is clean without re-reading a file or rewriting the index, and
 * they read the same. H, on a catalog and store of its own, gets the same image bytes.
 */
import { strict as assert } from 'node:assert';
import { chmodSync, mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { awcOk, cleanupMounts, readTreeInfo } from '../../helpers/cli.js';
import { makeTempDir, removeTempDir } from '../../helpers/temp-dir.js';
import { imageHosts } from '../../helpers/two-hosts.js';
import { fsTypeAt } from '../../helpers/mount-info.js';
import { metricSum, readAll } from '../../helpers/metrics.js';
import { layerImageSupport } from '../../../src/drivers/overlay/layer-image-mount.js';
import { digestHex } from '../../../src/core/digest.js';

const support = layerImageSupport();
const skip = process.getuid?.() !== 0 ? 'needs root' : !support.mount ? `layer images unsupported here: ${support.why}` : false;

/** Runs git in `dir` (as a user would, no locks skipped); returns stdout. */
function git(dir: string, ...args: string[]): string {
  const g = spawnSync('git', ['-C', dir, '-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { encoding: 'utf8' });
  assert.equal(g.status, 0, g.stderr);
  return g.stdout;
}

/** A repository of 60 files in directories, an executable and a symlink, committed once. */
function makeRepo(dir: string): void {
  for (let d = 0; d < 4; d++) {
    mkdirSync(join(dir, `dir${d}`, 'sub'), { recursive: true });
    for (let i = 0; i < 15; i++)
      writeFileSync(join(dir, `dir${d}`, i % 3 ? `f${i}.txt` : `sub/f${i}.txt`), `file ${d}/${i}\n`.repeat(i + 1));
  }
  writeFileSync(join(dir, 'run.sh'), '#!/bin/sh\necho hi\n');
  chmodSync(join(dir, 'run.sh'), 0o755);
  symlinkSync('dir0/f1.txt', join(dir, 'link'));
  git(dir, 'init', '-q');
  git(dir, 'add', '.');
  git(dir, 'commit', '-qm', 'one');
}

/** `git ls-files --debug` of the work tree at `dir`: path → the stat data its index records. */
function indexStat(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  let path = '';
  let rec: string[] = [];
  for (const line of git(dir, 'ls-files', '--debug').split('\n')) {
    if (line.startsWith('  ')) rec.push(line.trim().replace(/\s+/g, ' '));
    else {
      if (path) out.set(path, rec.join(' ').replace(/ flags: \S+$/, ''));
      path = line;
      rec = [];
    }
  }
  return out;
}

/** What git would record for `p` now (lstat, as `git ls-files --debug` prints it; dev as AWC records it, 0). */
function statLine(p: string): string {
  const st = spawnSync('stat', ['-c', '%Z %.9Z %Y %.9Y %i %u %g %s', p], { encoding: 'utf8' });
  assert.equal(st.status, 0, st.stderr);
  const [cs, cns, ms, mns, ino, uid, gid, size] = st.stdout.trim().split(' ');
  const ns = (x: string): number => Number(x!.split('.')[1]);
  return `ctime: ${cs}:${ns(cns!)} mtime: ${ms}:${ns(mns!)} dev: 0 ino: ${ino} uid: ${uid} gid: ${gid} size: ${size}`;
}

describe('the layer image of a snapshot whose import proved .git/index', { skip }, () => {
  let work = '';
  let repo = '';
  const homes: Record<string, string> = {};
  const env: Record<string, NodeJS.ProcessEnv> = {};
  let layerHex = '';
  let image = '';
  const mnt: Record<string, string> = {};

  before(async () => {
    work = await makeTempDir('awc-git-image-');
    repo = join(work, 'repo');
    mkdirSync(repo);
    makeRepo(repo);
    // E and H share; F uses what is shared (auto on SQLite); G neither (off): it builds the layer
    const hosts = imageHosts(work, ['e', 'f', 'g', 'h'], 'h', (h) => (h === 'f' ? 'auto' : h === 'g' ? 'off' : 'on'));
    Object.assign(homes, hosts.homes);
    Object.assign(env, hosts.env);
  });
  after(async () => {
    for (const h of Object.keys(homes)) cleanupMounts(homes[h]!, work, env[h]);
    if (work) await removeTempDir(work);
  });

  const run = (h: string, args: string[]): any => awcOk(homes[h]!, args, env[h]);

  it('gets an image at import, with the same bytes on another catalog and store', () => {
    const snap = run('e', ['snapshot', 'import', repo, '--name', 'g']);
    assert.ok(snap.image, `the import reports its image: ${JSON.stringify(snap.imageSkipped)}`);
    assert.equal(snap.image.built, true);
    layerHex = digestHex(snap.root);
    image = snap.image.digest;
    const other = run('h', ['snapshot', 'import', repo]);
    assert.equal(other.root, snap.root);
    assert.equal(other.image.digest, image, 'the same tree gives the same image (the rewritten index included)');
  });

  /** Forks and mounts snapshot `g` on host `h`; returns the workspace's mount point. */
  const mountOn = (h: string): string => {
    const ws = run(h, ['fork', 'g', '--name', `w${h}`]).workspaces[0].id;
    mnt[h] = join(work, `mnt-${h}`);
    run(h, ['mount', ws, mnt[h]!]);
    return mnt[h]!;
  };

  /** Content FUSE READs of host `h` so far (awc_fuse_operations_total{op="read"}). */
  const fuseReads = (h: string): number =>
    metricSum(run(h, ['metrics']).metrics as Record<string, unknown>, 'awc_fuse_operations_total', { op: 'read' });

  /**
   * Checks that git on host `h` trusts the index of the workspace at `at` as it is: every entry's
   * stat data are the file's, status is clean, no tracked file is read, the index is not rewritten.
   */
  const gitTrusts = (h: string, at: string): void => {
    const recorded = indexStat(at);
    assert.equal(recorded.size, 62);
    for (const [p, rec] of recorded) assert.equal(rec, statLine(join(at, p)), `the index's stat data of ${p} are what the workspace shows`);
    const before = statSync(join(at, '.git', 'index'), { bigint: true });
    const trace = join(work, `trace-${h}`);
    readAll(join(at, '.git')); // git's own reads of .git then hit the page cache, not the FUSE server
    const reads = fuseReads(h);
    assert.ok(reads > 0, 'the metric counts content reads (those of .git just now)');
    const st = spawnSync('git', ['-C', at, 'status', '--porcelain', '--untracked-files=all'], {
      encoding: 'utf8',
      env: { ...process.env, GIT_TRACE2_PERF: trace },
    });
    assert.equal(st.status, 0, st.stderr);
    assert.equal(st.stdout, '', 'git status is clean');
    assert.equal(fuseReads(h) - reads, 0, 'git read no content through the FUSE server');
    const after = statSync(join(at, '.git', 'index'), { bigint: true });
    assert.deepEqual(
      [after.ino, after.mtimeNs, after.ctimeNs],
      [before.ino, before.mtimeNs, before.ctimeNs],
      'git did not rewrite the index',
    );
    const perf = readFileSync(trace, 'utf8');
    assert.match(perf, /do_read_index/, 'the trace has the index regions');
    assert.doesNotMatch(perf, /do_write_index/, 'no index write in the trace');
  };

  it('a new host mounts it (no layer built there), and git trusts its index: clean, nothing re-read, nothing rewritten', () => {
    const at = mountOn('f');
    assert.equal(fsTypeAt(join(homes.f!, 'host', 'layers', layerHex, 'tree')), 'erofs', "host F's layer is the shared image");
    const m = run('f', ['metrics']).metrics as Record<string, unknown>;
    assert.equal(metricSum(m, 'awc_layer_images_total', { outcome: 'mounted' }), 1);
    gitTrusts('f', at);
  });

  it('a change cannot hide behind the image stat data: same size, mtime set back, git still sees it', () => {
    const at = mnt.f!;
    const p = join(at, 'dir0', 'f1.txt');
    const st = statSync(p, { bigint: true });
    const was = readFileSync(p);
    writeFileSync(p, Buffer.from(was).fill(0x78));
    const ns = String(st.mtimeNs % 1_000_000_000n).padStart(9, '0');
    assert.equal(spawnSync('touch', ['-d', `@${st.mtimeNs / 1_000_000_000n}.${ns}`, p]).status, 0);
    const now = statSync(p, { bigint: true });
    assert.deepEqual(
      [now.size, now.mtimeNs, now.ino],
      [st.size, st.mtimeNs, st.ino],
      'size, mtime and inode as before: only ctime differs',
    );
    assert.equal(git(at, 'status', '--porcelain'), ' M dir0/f1.txt\n');
    writeFileSync(p, was);
    assert.equal(git(at, 'status', '--porcelain'), '', 'the same bytes again: clean');
  });

  it('a layer built on a host (images off) reads the same, and git trusts its index too', () => {
    const at = mountOn('g');
    assert.equal(fsTypeAt(join(homes.g!, 'host', 'layers', layerHex, 'tree')), undefined, 'host G built a layer directory');
    gitTrusts('g', at);
    assert.deepEqual(
      readTreeInfo(mnt.g!, (r) => r === '.git/index'),
      readTreeInfo(mnt.f!, (r) => r === '.git/index'),
    );
    assert.deepEqual(
      readTreeInfo(mnt.f!, (r) => r.startsWith('.git')),
      readTreeInfo(repo, (r) => r.startsWith('.git')),
      'the source',
    );
    assert.equal(git(mnt.g!, 'ls-files', '-s'), git(mnt.f!, 'ls-files', '-s'), 'both indexes list the same entries');
    assert.equal(git(mnt.f!, 'ls-files', '-s'), git(repo, 'ls-files', '-s'));
  });
});
