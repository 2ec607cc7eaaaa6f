/**
 * Issue 12, fidelity item 17, a property-based test (fast-check): for random trees and
 * random sequences of edits made in a mounted workspace, the checkpoint holds exactly the
 * tree seen through the mount — its `export --dir` shows the same types, modes, contents,
 * link targets and nanosecond mtimes, and its `export --tar` re-imports to the same root
 * digest — on both mount drivers. The edits come in two rounds, each checkpointed; each
 * checkpoint's files, bytes and classes (issue 26: counted as its head's plus what changed)
 * equal a whole count of its tree. Names are drawn outside the secret and scratch patterns.
 * A failure prints fast-check's seed and the shrunk counterexample.
 */
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import {
  appendFileSync,
  chmodSync,
  linkSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import fc from 'fast-check';
import { detectDriver } from '../../../src/drivers/detect/detect-driver.js';
import { awcOk, cleanupMounts } from '../../helpers/cli.js';
import { Awc } from '../../../src/service/workspace/awc.js';
import type { Digest } from '../../../src/core/digest.js';
import { countRoot } from '../../../src/service/capture/tree-stats.js';
import { countStoredClasses } from '../../../src/service/capture/capture-classes.js';
import { CapturePolicy, parseProjectConfig } from '../../../src/service/capture/capture-policy.js';

/** Names: one of a few letters, then two more (never a secret, scratch or reconstructible pattern). */
const name = fc.tuple(fc.constantFrom('n', 'q', 'w'), fc.stringMatching(/^[a-f0-9]{1,2}$/)).map(([a, b]) => a + b);
const MODES = [0o644, 0o755, 0o600, 0o700, 0o444, 0o750];

/** Bytes of a file: a seed and a size (mostly small, sometimes several chunks). */
const content = fc.record({ seed: fc.nat(1000), size: fc.oneof(fc.nat(64), fc.nat(5000), fc.integer({ min: 60_000, max: 300_000 })) });
const bytesOf = (c: { seed: number; size: number }): Buffer => {
  const out = Buffer.alloc(c.size);
  let h = createHash('sha256').update(String(c.seed)).digest();
  for (let at = 0; at < c.size; at += 32) {
    h.copy(out, at);
    h = createHash('sha256').update(h).digest();
  }
  return out;
};

type Node =
  | { kind: 'file'; c: { seed: number; size: number }; mode: number }
  | { kind: 'link'; target: string }
  | { kind: 'dir'; children: Record<string, Node> };

const tree: fc.Arbitrary<Record<string, Node>> = fc.letrec<{ dir: Record<string, Node>; node: Node }>((tie) => ({
  dir: fc.dictionary(name, tie('node'), { maxKeys: 5 }),
  node: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.record({ kind: fc.constant('file' as const), c: content, mode: fc.constantFrom(...MODES) }),
    fc.record({ kind: fc.constant('link' as const), target: fc.constantFrom('n1', '../q2', '/etc/hostname', 'dangling/x', '.') }),
    tie('dir').map((children) => ({ kind: 'dir' as const, children })),
  ),
})).dir;

function build(dir: string, nodes: Record<string, Node>): void {
  for (const [n, node] of Object.entries(nodes)) {
    const p = join(dir, n);
    if (node.kind === 'file') {
      writeFileSync(p, bytesOf(node.c));
      chmodSync(p, node.mode);
    } else if (node.kind === 'link') symlinkSync(node.target, p);
    else {
      mkdirSync(p);
      build(p, node.children);
    }
  }
}

/** One edit; `pick`s are indices into the mount's current paths (taken modulo their count). */
const edit = fc.oneof(
  fc.record({ op: fc.constant('write' as const), dir: fc.nat(), n: name, c: content }),
  fc.record({ op: fc.constant('append' as const), pick: fc.nat(), c: content }),
  fc.record({ op: fc.constant('truncate' as const), pick: fc.nat(), len: fc.nat(100_000) }),
  fc.record({ op: fc.constant('rm' as const), pick: fc.nat() }),
  fc.record({ op: fc.constant('mkdir' as const), dir: fc.nat(), n: name }),
  fc.record({ op: fc.constant('rename' as const), pick: fc.nat(), dir: fc.nat(), n: name }),
  fc.record({ op: fc.constant('chmod' as const), pick: fc.nat(), mode: fc.constantFrom(...MODES) }),
  fc.record({ op: fc.constant('symlink' as const), dir: fc.nat(), n: name, target: fc.constantFrom('n1', 'q0/w1', '../..', 'gone') }),
  fc.record({ op: fc.constant('hardlink' as const), pick: fc.nat(), dir: fc.nat(), n: name }),
  fc.record({ op: fc.constant('rmdir-recreate' as const), dir: fc.nat(), n: name, c: content }),
  fc.record({ op: fc.constant('gitignore' as const), dir: fc.nat(), text: fc.constantFrom('q*\n', 'w1/\n', 'n0\n!n0/q1\n', '') }),
);
type Edit = typeof edit extends fc.Arbitrary<infer T> ? T : never;

/** Relative paths under `root` (directories first, in walk order), without following links. */
function paths(root: string, rel = ''): { rel: string; dir: boolean; file: boolean }[] {
  const out: { rel: string; dir: boolean; file: boolean }[] = [];
  for (const n of readdirSync(join(root, rel)).sort()) {
    const r = rel ? `${rel}/${n}` : n;
    const st = lstatSync(join(root, r));
    out.push({ rel: r, dir: st.isDirectory(), file: st.isFile() });
    if (st.isDirectory()) out.push(...paths(root, r));
  }
  return out;
}

/** Applies an edit at the mount; an edit the file system refuses (EISDIR, ENOTEMPTY, …) is simply not made. */
function apply(mnt: string, e: Edit): void {
  const all = paths(mnt);
  const dirs = ['', ...all.filter((x) => x.dir).map((x) => x.rel)];
  const files = all.filter((x) => x.file).map((x) => x.rel);
  const at = (rel: string) => join(mnt, rel);
  const inDir = (i: number, n: string) => at(dirs[i % dirs.length] ? `${dirs[i % dirs.length]}/${n}` : n);
  try {
    switch (e.op) {
      case 'write':
        return writeFileSync(inDir(e.dir, e.n), bytesOf(e.c));
      case 'append':
        if (files.length) appendFileSync(at(files[e.pick % files.length]!), bytesOf(e.c).subarray(0, 3000));
        return;
      case 'truncate':
        if (files.length) truncateSync(at(files[e.pick % files.length]!), e.len);
        return;
      case 'rm':
        if (all.length) rmSync(at(all[e.pick % all.length]!.rel), { recursive: true });
        return;
      case 'mkdir':
        return mkdirSync(inDir(e.dir, e.n));
      case 'rename':
        if (all.length) renameSync(at(all[e.pick % all.length]!.rel), inDir(e.dir, e.n));
        return;
      case 'chmod':
        if (all.length) chmodSync(at(all[e.pick % all.length]!.rel), e.mode | (all[e.pick % all.length]!.dir ? 0o700 : 0));
        return;
      case 'symlink':
        return symlinkSync(e.target, inDir(e.dir, e.n));
      case 'hardlink':
        if (files.length) linkSync(at(files[e.pick % files.length]!), inDir(e.dir, e.n));
        return;
      case 'gitignore':
        return writeFileSync(inDir(e.dir, '.gitignore'), e.text);
      case 'rmdir-recreate': {
        const d = inDir(e.dir, e.n);
        rmSync(d, { recursive: true, force: true });
        mkdirSync(d);
        return writeFileSync(join(d, 'w0'), bytesOf(e.c));
      }
    }
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (!['EEXIST', 'ENOENT', 'EISDIR', 'ENOTDIR', 'ENOTEMPTY', 'EINVAL', 'EPERM', 'EACCES', 'EMLINK'].includes(code ?? '')) throw err;
  }
}

/** What a tree shows: path → type, mode, content hash or target, and nanosecond mtime (not the root's). */
function shown(root: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const { rel } of paths(root)) {
    const p = join(root, rel);
    const st = lstatSync(p, { bigint: true });
    const kind = st.isDirectory() ? 'dir' : st.isFile() ? 'file' : st.isSymbolicLink() ? 'link' : 'other';
    const what = kind === 'file' ? createHash('sha256').update(readFileSync(p)).digest('hex') : kind === 'link' ? readlinkSync(p) : '';
    const mode = kind === 'link' ? 0n : st.mode & 0o7777n;
    out.set(rel, `${kind} ${mode.toString(8)} ${what} ${st.mtimeNs}`);
  }
  return out;
}

/**
 * A checkpoint's files, bytes and classes (counted from its head's plus what changed) equal
 * a whole count of its tree.
 */
async function assertWholeCounts(
  svc: Awc,
  cp: { root: Digest; files: number; bytes: number; classes: Record<string, { files: number; bytes: number }> },
): Promise<void> {
  const reader = svc.reader();
  assert.deepEqual({ files: cp.files, bytes: cp.bytes }, await countRoot(reader, cp.root), 'files and bytes as a whole count');
  const policy = new CapturePolicy(parseProjectConfig(undefined), { dropScratch: true });
  const { durable, reconstructible, ignored } = cp.classes;
  assert.deepEqual({ durable, reconstructible, ignored }, await countStoredClasses(reader, cp.root, policy), 'classes as a whole walk');
}

/**
 * What is checked of each checkpoint `cp` of a round, in process (the mount and the checkpoint
 * are the CLI's; the service's export and import are what the CLI's commands call, without a
 * Node start each: CI time): its counts, `export --dir` shows `seen`, and `export --tar`
 * re-imports to the same root.
 */
async function assertCheckpoint(
  home: string,
  driver: 'overlay' | 'copy',
  cp: { id: string; root: Digest; files: number; bytes: number; classes: Record<string, { files: number; bytes: number }> },
  seen: Map<string, string>,
  dir: string,
  r: number,
): Promise<void> {
  const svc = await Awc.open({ home, mountDriver: driver });
  try {
    await assertWholeCounts(svc, cp);
    const out = join(dir, `out${r}`);
    await svc.export(cp.id, { dir: out, keepPrivileges: true });
    assert.deepEqual(shown(out), seen, 'export --dir of the checkpoint');
    const tar = join(dir, `cp${r}.tar`);
    await svc.export(cp.id, { tar });
    assert.equal((await svc.importSnapshot(tar)).root, cp.root, 'export --tar re-imports to the same root');
  } finally {
    await svc.close();
  }
}

for (const driver of ['overlay', 'copy'] as const)
  describe(
    `random trees and random edits in a workspace checkpoint to what the mount shows (${driver} driver)`,
    { skip: driver === 'copy' || detectDriver('auto').driver === 'overlay' ? false : 'overlay is not possible on this host' },
    () => {
      const work = mkdtempSync(join(tmpdir(), `awc-property-${driver}-`));
      const home = join(work, 'home');
      const env = { AWC_MOUNT_DRIVER: driver };
      after(() => {
        cleanupMounts(home, work);
        rmSync(work, { recursive: true, force: true });
      });

      test('checkpoint, export --dir and export --tar hold exactly the tree seen through the mount', { timeout: 15 * 60_000 }, async () => {
        let run = 0;
        await fc.assert(
          fc.asyncProperty(tree, fc.array(edit, { minLength: 1, maxLength: 14 }), async (initial, edits) => {
            const dir = join(work, `run${run++}`);
            const src = join(dir, 'src');
            mkdirSync(src, { recursive: true });
            build(src, initial);
            const snap = awcOk(home, ['snapshot', 'import', src], env);
            const ws = awcOk(home, ['fork', snap.id], env).workspaces[0].id;
            const mnt = join(dir, 'mnt');
            awcOk(home, ['mount', ws, mnt], env);
            try {
              assert.deepEqual(shown(mnt), shown(src), 'the mount shows the imported tree');
              // two rounds: the second checkpoint counts from the first's counts (what changed only)
              const half = Math.ceil(edits.length / 2);
              for (const [r, round] of [edits.slice(0, half), edits.slice(half)].entries()) {
                for (const e of round) apply(mnt, e);
                const seen = shown(mnt);
                const cp = awcOk(home, ['checkpoint', ws], env);
                await assertCheckpoint(home, driver, cp, seen, dir, r);
              }
            } finally {
              awcOk(home, ['unmount', ws, '--discard'], env);
              awcOk(home, ['rm', ws], env);
              rmSync(dir, { recursive: true, force: true });
            }
          }),
          // 15 cases of two checkpointed rounds each: about the checkpoints (and the minutes) of 25 cases of one round
          { numRuns: 15, interruptAfterTimeLimit: 8 * 60_000, markInterruptAsFailure: false },
        );
      });
    },
  );
